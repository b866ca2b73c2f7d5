"""Dead-letter cycles across subscriptions are found before one is created.

Goal: S1 on A dead-lettering to D, with S2 on D dead-lettering back to A,
bounced one poison event between the topics for ever; the check finds such
a cycle of any length (shortest first), names its topics and subscriptions
shortened as the catalogue quotes, accepts chains that end, and takes one
step per subscription whatever the graph (no recursion, no blow-up).
Method: `find_cycle` on small mappings; the manager's refusal with a real
RocksDB store, registry and manager (no broker process).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.subscription.dead_letter_cycle import Hop, cycle_text, find_cycle
from broker.subscription.manager import SubscriptionManager
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb


def test_two_topics_dead_lettering_into_each_other_are_a_cycle() -> None:
    cycle = find_cycle(Hop("A", "s1", "D"), {"D": [("s2", "A")]})
    assert cycle == [Hop("A", "s1", "D"), Hop("D", "s2", "A")]
    assert cycle_text(cycle) == "'A' -[subscription 's1']-> 'D' -[subscription 's2']-> 'A'"


def test_a_longer_cycle_is_found_and_the_shortest_one_named() -> None:
    existing = {"D": [("x", "F"), ("s2", "E")], "E": [("s3", "A")],
                "F": [("y", "G")], "G": [("z", "A")]}
    cycle = find_cycle(Hop("A", "s1", "D"), existing)
    assert cycle == [Hop("A", "s1", "D"), Hop("D", "s2", "E"), Hop("E", "s3", "A")]


def test_chains_that_end_or_loop_elsewhere_are_accepted() -> None:
    assert find_cycle(Hop("A", "s1", "D"), {"D": [("s2", "E")]}) is None
    assert find_cycle(Hop("A", "s1", "D"), {}) is None
    assert find_cycle(Hop("A", "s1", ""), {"D": [("s2", "A")]}) is None  # no dead-letter topic
    # a subscription on A itself is not on the path from D back to A
    assert find_cycle(Hop("A", "s1", "D"), {"A": [("s0", "D")], "D": [("s2", "E")]}) is None
    # a subscription without a dead-letter topic ends its chain
    assert find_cycle(Hop("A", "s1", "D"), {"D": [("s2", "")]}) is None
    # chains that meet again (a diamond) and a loop that does not pass A (made
    # before this check): visited once each, no cycle through A
    assert find_cycle(Hop("A", "s1", "D"), {"D": [("p", "E"), ("q", "F")], "E": [("r", "G")],
                                            "F": [("s", "G")], "G": [("t", "D")]}) is None


class _CountingLookups(dict[str, list[tuple[str, str]]]):
    """DeadLetters that count the topics looked up (the search's steps)."""

    lookups = 0

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.lookups += 1
        return super().get(key, default)


def test_a_long_chain_is_followed_in_one_step_per_subscription() -> None:
    """100,000 topics in a chain back to A, and a wide fan-out: no recursion limit,
    each topic looked up once (a count, not a time: the machine is shared)."""
    n = 100_000
    chain = _CountingLookups({f"T{i}": [("s", f"T{i + 1}")] for i in range(n)})
    chain[f"T{n}"] = [("last", "A")]
    fan = _CountingLookups({"D": [(f"s{i}", f"F{i}") for i in range(n)]})
    cycle = find_cycle(Hop("A", "first", "T0"), chain)
    assert cycle is not None and len(cycle) == n + 2 and cycle[-1] == Hop(f"T{n}", "last", "A")
    assert chain.lookups == n + 1  # T0..Tn; A is the goal, never looked up
    assert find_cycle(Hop("A", "first", "D"), fan) is None
    assert fan.lookups == n + 1  # D, then each of its n dead-letter topics once


def test_long_names_are_shortened_in_the_cycle_text() -> None:
    long = "t" * 10_000
    text = cycle_text([Hop(long, "s", "D"), Hop("D", "s" * 100, long)])
    assert text.count("(10,000 characters)") == 2 and "(100 characters)" in text
    assert len(text) < 400


def test_the_manager_refuses_a_subscription_closing_a_cycle_and_creates_nothing(
        tmp_path: Path) -> None:
    async def body() -> None:
        store = RocksStore(str(tmp_path), fsync=False)
        registry = TopicRegistry(store, Settings())
        await registry.open()
        for topic in ("A", "D", "A-s1-DLQ"):
            await registry.create(topic, pb.TopicConfig(partitions=1))
        manager = SubscriptionManager(registry, store, Settings(), {})
        await manager.open()
        await manager.attach(pb.SubscribeOpen(topic="D", subscription="s2", consumer_name="c",
                                              max_redeliveries=1, dead_letter_topic="A"))
        await manager.attach(pb.SubscribeOpen(topic="A-s1-DLQ", subscription="back",
                                              consumer_name="c", max_redeliveries=1,
                                              dead_letter_topic="A"))
        closing = [pb.SubscribeOpen(topic="A", subscription="s1", consumer_name="c",
                                    max_redeliveries=1, dead_letter_topic="D"),
                   pb.SubscribeOpen(topic="A", subscription="s1", consumer_name="c",
                                    max_redeliveries=1)]  # the default A-s1-DLQ
        texts = ["'A' -[subscription 's1']-> 'D' -[subscription 's2']-> 'A'",
                 "'A' -[subscription 's1']-> 'A-s1-DLQ' -[subscription 'back']-> 'A'"]
        for request, text in zip(closing, texts, strict=True):
            with pytest.raises(BrokerError) as caught:
                await manager.attach(request)
            assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION
            assert f"would close a dead-letter cycle: {text};" in caught.value.message
            assert "keybus subscriptions delete" in caught.value.message
        assert manager.list_all("A") == []
        assert store.load_subscriptions(registry.meta("A").topic_id) == []
        await manager.attach(pb.SubscribeOpen(topic="A", subscription="s1", consumer_name="c",
                                              max_redeliveries=1, dead_letter_topic="E"))
        assert [i.subscription for i in manager.list_all("A")] == ["s1"]
        await manager.close()
        await registry.close()
        store.close()

    asyncio.run(body())
