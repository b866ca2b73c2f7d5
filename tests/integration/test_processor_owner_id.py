"""Two running processors given the same owner_id: one finds out and stops.

Goal: before, both renewed each other's records and processed every
partition for ever, silently. Now the instance whose records were claimed
under its id by another writer reports DuplicateOwnerId through on_error
(naming the id), closes its partitions ("ownership_lost"), balances no more
and releases nothing; the other goes on owning and processing every
partition. Once per ownership store.
Method: a real broker process and redis-server; processor A runs alone
until it owns every partition, then B starts with A's owner_id; 0.5 s
intervals, 2 s expiration; every wait is a bounded poll. B's balancing
cycles are the clock for "A stays stopped".
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from sdk import Admin
from sdk.processor import DuplicateOwnerId, EventProcessor, PartitionContext
from sdk.processor.context import CloseReason
from sdk.reader import ReadBatch
from tests.support.broker_process import BrokerProcess
from tests.support.processors import (
    EXPIRATION_MS,
    INTERVAL_MS,
    OWNERSHIP_KINDS,
    ownership_store,
    produce,
    redis_server,  # noqa: F401
    wait_for,
)

PARTITIONS = 4


class Instance:
    """One processor and what it saw."""

    def __init__(self, broker: str, topic: str, store: Any) -> None:
        self.errors: list[BaseException] = []
        self.closes: Counter[CloseReason] = Counter()
        self.events = 0
        self.processor = EventProcessor(
            broker, topic, "billing", on_event=self.on_event, owner_id="worker-same",
            on_error=lambda context, error: self.errors.append(error),
            on_partition_close=lambda context, reason: self.closes.update([reason]),
            ownership_store=store, load_balancing_interval_ms=INTERVAL_MS,
            ownership_expiration_ms=EXPIRATION_MS)

    async def on_event(self, context: PartitionContext, batch: ReadBatch) -> None:
        self.events += batch.count
        await context.update_checkpoint(batch)

    def duplicates(self) -> list[BaseException]:
        return [e for e in self.errors if isinstance(e, DuplicateOwnerId)]


@pytest.mark.parametrize("kind", OWNERSHIP_KINDS)
def test_the_same_owner_id_twice_is_reported_and_one_stops(
        kind: str, shared_broker: BrokerProcess, request: pytest.FixtureRequest) -> None:
    redis = request.getfixturevalue("redis_server") if kind == "redis" else None
    broker, topic = shared_broker.address, f"same-owner-{kind}"

    async def run() -> None:
        async with Admin(broker) as admin:
            await admin.create_topic(topic, partitions=PARTITIONS)
        await produce(broker, topic, PARTITIONS, 20)
        stores = [ownership_store(kind, broker, redis) for _ in range(2)]
        first, second = (Instance(broker, topic, store) for store in stores)
        try:
            async with first.processor:
                await wait_for(lambda: len(first.processor.owned_partitions) == PARTITIONS, 15,
                               "the first processor owns every partition")
                async with second.processor:
                    await wait_for(lambda: bool(first.duplicates() or second.duplicates()), 15,
                                   "a DuplicateOwnerId reported through on_error")
                    assert first.duplicates() and not second.duplicates(), \
                        (first.errors, second.errors)
                    assert "owner_id 'worker-same' is used by another running processor" in \
                        str(first.duplicates()[0])
                    await wait_for(lambda: first.processor.owned_partitions == [], 10,
                                   "the first processor closed every partition")
                    cycles = second.processor.stats.cycles
                    await wait_for(lambda: second.processor.stats.cycles >= cycles + 3, 10,
                                   "three more cycles of the second processor")
                    assert first.processor.owned_partitions == []
                    assert len(first.duplicates()) == 1  # it stopped balancing
                    assert first.closes == Counter({"ownership_lost": PARTITIONS})
                    assert second.processor.owned_partitions == list(range(PARTITIONS))
                    assert not second.duplicates()
        finally:
            for store in stores:
                await store.close()  # type: ignore[attr-defined]
    asyncio.run(run())
