"""Dead-letter cycles across subscriptions: found before one is created, and
among those already stored.

A subscription dead-letters events it gave up on into its dead-letter topic;
a subscription on that topic with a dead-letter topic of its own moves them
on. When the chain leads back to the first topic (S1 on A dead-letters to
D, S2 on D dead-letters to A) one poison event bounces along it for ever,
every lap a new event in every topic of the cycle. `spec.py` refuses the
one-step cycle (a dead-letter topic equal to the subscribed one); this
module finds the longer ones.

Pure: it sees the broker's subscriptions as a mapping, topic to its
(subscription, dead-letter topic) pairs. The search is breadth-first over
topics, each visited once, so it takes at most one step per subscription
whatever the chains look like, and finds a shortest cycle (the one to name).

`find_cycles` finds the cycles already there: a data directory from before
the check, or a relay follower that copied its upstream's subscriptions
unchecked (S1 on A -> D made here, then S2 on D -> A copied). The strongly
connected components of the topic graph say which subscriptions are on a
cycle at all (Tarjan's algorithm, iterative); each of those is then named in
a shortest cycle through it. Listing every elementary cycle could take time
exponential in the subscriptions; this takes one search per cycle named.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from broker.errors import quote


@dataclass(frozen=True, slots=True)
class Hop:
    """Subscription `subscription` on `topic` dead-letters into `dead_letter_topic`."""

    topic: str
    subscription: str
    dead_letter_topic: str


# topic -> (subscription, dead-letter topic) of its subscriptions that have one
DeadLetters = Mapping[str, Sequence[tuple[str, str]]]


def find_cycle(new: Hop, existing: DeadLetters) -> list[Hop] | None:
    """The hops of a shortest cycle that `new` would close, starting with `new`,
    or None. Only the chains from `new.dead_letter_topic` back to `new.topic`
    matter: a cycle already in `existing` (stored before this check, or copied
    by a relay follower: see `find_cycles`) is passed by, each topic visited once.
    """
    if not new.dead_letter_topic:
        return None
    path = _shortest_path(new.dead_letter_topic, new.topic, existing, None)
    return None if path is None else [new, *path]


def by_topic(hops: Iterable[Hop]) -> dict[str, list[tuple[str, str]]]:
    """`hops` as `DeadLetters` (a hop without a dead-letter topic ends every chain: left out)."""
    dead_letters: dict[str, list[tuple[str, str]]] = {}
    for hop in hops:
        if hop.dead_letter_topic:
            dead_letters.setdefault(hop.topic, []).append((hop.subscription,
                                                           hop.dead_letter_topic))
    return dead_letters


def find_cycles(hops: Iterable[Hop]) -> list[list[Hop]]:
    """Dead-letter cycles among `hops`: every hop on some cycle is in at least
    one, each a shortest cycle through the first (in name order) hop not yet
    named, which it starts with. A hop whose dead-letter topic is its own topic
    is a cycle of one. Deterministic: the same hops give the same cycles."""
    ordered = sorted({hop for hop in hops if hop.dead_letter_topic},
                     key=lambda h: (h.topic, h.subscription, h.dead_letter_topic))
    dead_letters = by_topic(ordered)
    component = _components(dead_letters)
    members: dict[int, set[str]] = {}
    for topic, number in component.items():
        members.setdefault(number, set()).add(topic)
    cycles: list[list[Hop]] = []
    named: set[Hop] = set()
    for hop in ordered:
        here = component[hop.topic]
        if hop in named or component[hop.dead_letter_topic] != here:
            continue  # named already, or its chain never comes back
        path = _shortest_path(hop.dead_letter_topic, hop.topic, dead_letters, members[here])
        assert path is not None, "a hop within a strongly connected component is on a cycle"
        cycles.append([hop, *path])
        named.update(cycles[-1])
    return cycles


def _shortest_path(start: str, goal: str, dead_letters: DeadLetters,
                   within: Container[str] | None) -> list[Hop] | None:
    """The hops of a shortest chain from `start` to `goal` through topics
    `within` (None: any), [] when they are one, or None: breadth-first, each
    topic visited once."""
    came_from: dict[str, Hop | None] = {start: None}
    queue = deque([start])
    while queue:
        topic = queue.popleft()
        if topic == goal:
            return _path_to(topic, came_from)
        for subscription, dead_letter_topic in dead_letters.get(topic, ()):
            if dead_letter_topic and dead_letter_topic not in came_from \
                    and (within is None or dead_letter_topic in within):
                came_from[dead_letter_topic] = Hop(topic, subscription, dead_letter_topic)
                queue.append(dead_letter_topic)
    return None


def _components(dead_letters: DeadLetters) -> dict[str, int]:
    """Topic -> its strongly connected component's number, for every topic of
    `dead_letters` (Tarjan's algorithm with an explicit stack: a chain of
    100,000 topics needs no recursion). Two topics share a number when each
    one's chain reaches the other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    component: dict[str, int] = {}

    def visit(topic: str) -> tuple[str, Iterator[tuple[str, str]]]:
        index[topic] = low[topic] = len(index)
        stack.append(topic)
        on_stack.add(topic)
        return topic, iter(dead_letters.get(topic, ()))

    for root in dead_letters:
        if root in index:
            continue
        work = [visit(root)]
        while work:
            topic, edges = work[-1]
            for _, target in edges:
                if target not in index:
                    work.append(visit(target))
                    break
                if target in on_stack:
                    low[topic] = min(low[topic], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[topic])
                if low[topic] == index[topic]:
                    number = len(component)
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component[member] = number
                        if member == topic:
                            break
    return component


def _path_to(topic: str, came_from: Mapping[str, Hop | None]) -> list[Hop]:
    """The hops from the search's start to `topic` (each topic has one entry, so
    this walks at most one step per topic)."""
    path: list[Hop] = []
    hop = came_from[topic]
    while hop is not None:
        path.append(hop)
        hop = came_from[hop.topic]
    path.reverse()
    return path


def cycle_text(cycle: Sequence[Hop]) -> str:
    """`'A' -[subscription 's1']-> 'D' -[subscription 's2']-> 'A'`, every name
    shortened as the error catalogue quotes client strings."""
    parts = [quote(cycle[0].topic)]
    for hop in cycle:
        parts.append(f"-[subscription {quote(hop.subscription)}]-> {quote(hop.dead_letter_topic)}")
    return " ".join(parts)
