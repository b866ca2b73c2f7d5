"""Dead-letter cycles across subscriptions: found before one is created.

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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
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
    matter: `existing` has no cycle of its own (each was refused when made).
    """
    if not new.dead_letter_topic:
        return None
    start = new.dead_letter_topic
    came_from: dict[str, Hop | None] = {start: None}
    queue = deque([start])
    while queue:
        topic = queue.popleft()
        if topic == new.topic:
            return [new, *_path_to(topic, came_from)]
        for subscription, dead_letter_topic in existing.get(topic, ()):
            if dead_letter_topic and dead_letter_topic not in came_from:
                came_from[dead_letter_topic] = Hop(topic, subscription, dead_letter_topic)
                queue.append(dead_letter_topic)
    return None


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
