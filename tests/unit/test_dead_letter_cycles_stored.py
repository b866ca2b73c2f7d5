"""Dead-letter cycles already stored are found, each named once, nothing changed.

Goal: a cycle the create check never saw (a data directory from before it, or
a relay follower's copy closing a cycle with a subscription made here) is
named in one WARNING line with its topics, subscriptions and what to do,
once while it lasts, and counted in keybus_dead_letter_cycles; nothing is
refused or deleted. `find_cycles` names every subscription on a cycle, in
shortest cycles, one search per cycle, whatever the graph.
Method: `find_cycles` and `CycleWatch` on small inputs; the manager with a
real RocksDB store and registry (no broker process), its log through caplog.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from broker.config import Settings
from broker.log.rocks_store import RocksStore
from broker.metrics import DEAD_LETTER_CYCLES
from broker.subscription.dead_letter_cycle import Hop, find_cycles
from broker.subscription.dead_letter_watch import CycleWatch
from broker.subscription.manager import SubscriptionManager
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb


def test_two_topics_into_each_other_and_a_chain_that_ends() -> None:
    hops = [Hop("D", "s2", "A"), Hop("A", "s1", "D"), Hop("D", "out", "E"), Hop("E", "x", "")]
    assert find_cycles(hops) == [[Hop("A", "s1", "D"), Hop("D", "s2", "A")]]
    assert find_cycles([Hop("A", "s1", "D"), Hop("D", "s2", "E")]) == []
    assert find_cycles([]) == []


def test_several_disjoint_cycles_are_each_found() -> None:
    hops = [Hop("A", "a", "B"), Hop("B", "b", "A"),
            Hop("P", "p", "Q"), Hop("Q", "q", "R"), Hop("R", "r", "P"),
            Hop("X", "x", "X"),  # a one-topic loop (refused now, maybe stored before)
            Hop("R", "leak", "Z"), Hop("Z", "z", "")]  # a chain out of a cycle: not on it
    cycles = find_cycles(reversed(hops))
    assert cycles == [[Hop("A", "a", "B"), Hop("B", "b", "A")],
                      [Hop("P", "p", "Q"), Hop("Q", "q", "R"), Hop("R", "r", "P")],
                      [Hop("X", "x", "X")]]


def test_every_subscription_on_a_cycle_is_named_in_a_shortest_one() -> None:
    """A -> D -> A and A -> D -> E -> A share A -> D: both named, shortest first;
    two subscriptions of A into D are two cycles."""
    hops = [Hop("A", "s1", "D"), Hop("D", "s2", "A"), Hop("D", "s3", "E"),
            Hop("E", "s4", "A"), Hop("A", "twin", "D")]
    cycles = find_cycles(hops)
    assert cycles == [[Hop("A", "s1", "D"), Hop("D", "s2", "A")],
                      [Hop("A", "twin", "D"), Hop("D", "s2", "A")],
                      [Hop("D", "s3", "E"), Hop("E", "s4", "A"), Hop("A", "s1", "D")]]
    assert {hop for cycle in cycles for hop in cycle} == set(hops)


def test_a_long_cycle_and_a_long_chain_take_one_step_per_subscription() -> None:
    """A cycle of 100,000 topics, beside a chain of 100,000 that ends and a wide
    fan-out: no recursion limit, well under the bound."""
    n = 100_000
    hops = [Hop(f"T{i}", "s", f"T{(i + 1) % n}") for i in range(n)]
    hops += [Hop(f"C{i}", "s", f"C{i + 1}") for i in range(n)]
    hops += [Hop("F", f"s{i}", f"G{i}") for i in range(n)]
    started = time.process_time()  # CPU, not the wall: a loaded machine is not a slow walk
    cycles = find_cycles(hops)
    assert len(cycles) == 1 and len(cycles[0]) == n and set(cycles[0]) == set(hops[:n])
    assert time.process_time() - started < 10


def test_the_watch_names_a_cycle_once_while_it_lasts() -> None:
    watch = CycleWatch()
    hops = [Hop("A", "s1", "D"), Hop("D", "s2", "A")]
    new, gone = watch.process_hops(hops)
    assert new == [hops] and gone == []
    assert watch.process_hops(hops) == ([], [])  # the next round: nothing new
    # a third subscription closing a second cycle through A -> D: only that one is new
    more = [*hops, Hop("D", "s3", "A")]
    assert watch.process_hops(more) == ([[Hop("D", "s3", "A"), Hop("A", "s1", "D")]], [])
    new, gone = watch.process_hops([Hop("A", "s1", "D"), Hop("D", "s3", "A")])  # s2 deleted
    assert new == [] and gone == [frozenset(hops)]
    # s2 back, s3 deleted: the first cycle is named again, the second is gone
    assert watch.process_hops(hops) == ([hops], [frozenset(more) - {Hop("D", "s2", "A")}])


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "dead-letter cycle" in r.getMessage()]


def test_the_manager_names_a_stored_cycle_at_start_and_a_copied_one_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A stored cycle at start; then, as on a relay follower, a consumer makes S1
    (P -> Q) and the copy of S2 (Q -> P) closes a cycle: named once, on the copy,
    not again on later rounds; deleting S2 ends it. Nothing refused or deleted."""
    caplog.set_level(logging.INFO, logger="keybus.subscriptions")

    def open_of(topic: str, name: str, dead_letter: str) -> pb.SubscribeOpen:
        return pb.SubscribeOpen(topic=topic, subscription=name, consumer_name="c",
                                type=pb.SHARED, max_redeliveries=1, dead_letter_topic=dead_letter)

    async def body() -> None:
        store = RocksStore(str(tmp_path), fsync=False)
        registry = TopicRegistry(store, Settings())
        await registry.open()
        for topic in ("A", "D", "P", "Q"):
            await registry.create(topic, pb.TopicConfig(partitions=1))
        manager = SubscriptionManager(registry, store, Settings(), {})
        await manager.open()
        # an older broker's data directory: stored with no check
        assert await manager.ensure(open_of("A", "s1", "D"), 1)
        assert await manager.ensure(open_of("D", "s2", "A"), 1)
        await manager.close()
        caplog.clear()

        manager = SubscriptionManager(registry, store, Settings(), {})
        await manager.open()
        [start] = _warnings(caplog)
        assert ("dead-letter cycle among stored subscriptions (found at start): 'A' "
                "-[subscription 's1']-> 'D' -[subscription 's2']-> 'A';") in start
        assert "keybus subscriptions delete TOPIC SUBSCRIPTION" in start
        assert DEAD_LETTER_CYCLES._value.get() == 1
        caplog.clear()

        session = await manager.attach(open_of("P", "s1", "Q"))
        assert _warnings(caplog) == []
        for _ in range(3):  # sync rounds: created once, then already there
            await manager.ensure(open_of("Q", "s2", "P"), 1)
        [copied] = _warnings(caplog)
        assert ("(closed by 's2' on 'Q', copied by a relay follower): 'P' -[subscription 's1']-> "
                "'Q' -[subscription 's2']-> 'P';") in copied
        assert DEAD_LETTER_CYCLES._value.get() == 2
        assert [i.subscription for i in manager.list_all("Q")] == ["s2"]  # nothing refused
        manager.detach(session)

        caplog.clear()
        await manager.delete("Q", "s2", force=False)
        assert _warnings(caplog) == []
        assert any("dead-letter cycle gone" in r.getMessage() and "'s2' on 'Q'" in r.getMessage()
                   for r in caplog.records)
        assert DEAD_LETTER_CYCLES._value.get() == 1
        assert [i.subscription for i in manager.list_all("A")] == ["s1"]
        await manager.close()
        await registry.close()
        store.close()

    asyncio.run(body())
