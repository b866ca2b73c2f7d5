"""The checkpoint lag follows the log, not only the checkpoints.

Goal: `stats.checkpoint_lag` and `keybus_processor_checkpoint_lag_events`
(docs/event-processor.md, Metrics: events after the last checkpoint up to
the end of the log) grow when events are read that the callback does not
checkpoint, as a Kafka group's lag grows while it commits nothing. Before,
the lag was set only when a checkpoint was written: a partition whose
callback stopped checkpointing kept showing its last lag (0 once caught up),
and one that never checkpointed had no lag at all, so an alert on the lag
never fired for a stuck consumer group. A partition taken over by another
processor leaves the old owner's lag: only its owner says it (before, the
old owner kept its last value beside the new owner's).
Method: a real broker process; one processor over two partitions: partition
0 checkpoints its first batch (5 events) and not the second (7 events),
partition 1 never checkpoints (3 events). Then a second processor joins and
takes one partition. Every wait is bounded.
"""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from sdk import Admin, Producer
from sdk.processor import EventProcessor, PartitionContext
from sdk.reader import ReadBatch
from tests.support.broker_process import BrokerProcess
from tests.support.processors import EXPIRATION_MS, INTERVAL_MS, produce, wait_for

TOPIC, GROUP = "checkpoint-lag", "g"
HANDOVER_TOPIC = "checkpoint-lag-handover"


def gauge(processor: EventProcessor, partition: int, topic: str = TOPIC) -> float | None:
    return REGISTRY.get_sample_value("keybus_processor_checkpoint_lag_events", {
        "topic": topic, "consumer_group": GROUP, "owner": processor.owner_id,
        "partition": str(partition)})


def test_events_read_but_not_checkpointed_count_in_the_lag(shared_broker: BrokerProcess) -> None:
    broker = shared_broker.address
    read: list[tuple[int, int]] = []  # (partition, events) per batch

    async def on_event(context: PartitionContext, batch: ReadBatch) -> None:
        if context.partition == 0 and not read:
            await context.update_checkpoint(batch)
        read.append((context.partition, batch.count))

    async def go() -> tuple[dict[int, int], float | None, float | None]:
        async with Admin(broker) as admin:
            await admin.create_topic(TOPIC, partitions=2)
        processor = EventProcessor(broker, TOPIC, GROUP, on_event=on_event,
                                   load_balancing_interval_ms=INTERVAL_MS,
                                   ownership_expiration_ms=EXPIRATION_MS)
        async with processor:
            await wait_for(lambda: processor.owned_partitions == [0, 1], 15, "claimed")
            await produce(broker, TOPIC, 1, 5)
            await wait_for(lambda: processor.stats.checkpoints == 1, 15, "checkpointed",
                           state=lambda: f"read {read}")
            await produce(broker, TOPIC, 1, 7)
            await produce_to(broker, 1, 3)
            await wait_for(lambda: sum(n for _, n in read) == 15, 15, "every event read",
                           state=lambda: f"read {read}")
            return dict(processor.stats.checkpoint_lag), gauge(processor, 0), gauge(processor, 1)

    lag, gauge_0, gauge_1 = asyncio.run(go())
    assert lag == {0: 7, 1: 3}, f"read {read}: lag {lag} (the 7 and 3 events read after the "\
        "last checkpoint, or without one)"
    assert (gauge_0, gauge_1) == (7, 3)


async def produce_to(broker: str, partition: int, events: int) -> None:
    """events to that partition only (produce() fills partitions 0..n-1)."""
    async with await Producer.create(broker, TOPIC) as producer:
        await producer.send_batch(list(range(events)), [b"v"] * events, partition=partition)
        await producer.flush()


def test_a_partition_taken_over_leaves_the_old_owners_lag(shared_broker: BrokerProcess) -> None:
    broker = shared_broker.address

    async def on_event(context: PartitionContext, batch: ReadBatch) -> None:
        await context.update_checkpoint(batch)

    def build() -> EventProcessor:
        return EventProcessor(broker, HANDOVER_TOPIC, GROUP, on_event=on_event,
                              load_balancing_interval_ms=INTERVAL_MS,
                              ownership_expiration_ms=EXPIRATION_MS)

    async def go() -> tuple[list[int], list[int], list[int], list[float | None]]:
        async with Admin(broker) as admin:
            await admin.create_topic(HANDOVER_TOPIC, partitions=2)
        first = build()
        async with first:
            await wait_for(lambda: first.owned_partitions == [0, 1], 15, "claimed")
            await produce(broker, HANDOVER_TOPIC, 2, 4)
            await wait_for(lambda: sorted(first.stats.checkpoint_lag) == [0, 1], 15,
                           "both partitions checkpointed")
            async with build() as second:
                await wait_for(lambda: len(first.owned_partitions) == 1
                               and len(second.owned_partitions) == 1
                               and len(first.stats.checkpoint_lag) == 1, 20,
                               "one partition handed over and the old owner's lag gone",
                               state=lambda: f"first owns {first.owned_partitions} with lag "
                                             f"{first.stats.checkpoint_lag}, second owns "
                                             f"{second.owned_partitions}")
                return (first.owned_partitions, sorted(first.stats.checkpoint_lag),
                        second.owned_partitions,
                        [gauge(first, p, HANDOVER_TOPIC) for p in (0, 1)])

    owned, with_lag, taken, gauges = asyncio.run(go())
    assert with_lag == owned and taken != owned
    assert gauges[taken[0]] is None and gauges[owned[0]] == 0
