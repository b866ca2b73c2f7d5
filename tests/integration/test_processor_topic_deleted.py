"""An event processor whose topic is deleted is told it was deleted.

Goal: once a cycle found the topic, every later cycle that no longer finds it
reports "topic 'T' was deleted" to on_error (and the log), as a consumer
attached to the topic is told; the broker's "topic 'T' does not exist; create
it first" is for a processor started on a topic that never was (also checked).
Method: one broker process, a processor balancing every 100 ms, the delete
through Admin; every wait bounded.
"""

from __future__ import annotations

import asyncio

from sdk import Admin, Producer, TopicNotFound
from sdk.processor import CloseReason, EventProcessor, PartitionContext
from sdk.reader import ReadBatch
from tests.support.broker_process import BrokerProcess
from tests.support.processors import wait_for

TOPIC = "short-lived"


class Seen:
    def __init__(self) -> None:
        self.processed = 0
        self.closes: list[CloseReason] = []
        self.errors: list[tuple[int | None, BaseException]] = []  # (partition, error)

    def processor(self, broker: str, topic: str) -> EventProcessor:
        async def on_event(context: PartitionContext, batch: ReadBatch) -> None:
            self.processed += batch.count

        async def on_error(context: PartitionContext | None, error: BaseException) -> None:
            self.errors.append((context.partition if context else None, error))

        async def on_close(context: PartitionContext, reason: CloseReason) -> None:
            self.closes.append(reason)
        return EventProcessor(broker, topic, "billing", on_event=on_event, on_error=on_error,
                              on_partition_close=on_close, load_balancing_interval_ms=100,
                              ownership_expiration_ms=5_000)

    def cycle_errors(self) -> list[BaseException]:
        return [e for partition, e in self.errors if partition is None]


def test_a_processor_whose_topic_is_deleted_is_told_it_was_deleted(broker: BrokerProcess) -> None:
    async def go() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic(TOPIC, partitions=2)
        async with await Producer.create(broker.address, TOPIC) as producer:
            for partition in (0, 1):
                await (await producer.send_batch([1, 2], [b"a", b"b"], partition=partition))
        seen = Seen()
        processor = seen.processor(broker.address, TOPIC)
        await processor.start()
        try:
            await wait_for(lambda: seen.processed == 4, 20, "the processor read every event")
            async with Admin(broker.address) as admin:
                await admin.delete_topic(TOPIC)
            await wait_for(lambda: len(seen.closes) == 2 and len(seen.cycle_errors()) >= 2, 20,
                           "both partitions closed and two cycles failed",
                           state=lambda: f"{seen.closes}, {seen.errors}")
        finally:
            await processor.stop()
        told = {f"{type(e).__name__}: {e}" for _, e in seen.errors}
        assert told == {f"TopicNotFound: topic {TOPIC!r} was deleted"}, told

    asyncio.run(go())


def test_a_processor_of_a_topic_that_never_was_is_told_to_create_it(
        broker: BrokerProcess) -> None:
    async def go() -> None:
        seen = Seen()
        processor = seen.processor(broker.address, "never-made")
        await processor.start()
        try:
            await wait_for(lambda: len(seen.cycle_errors()) >= 2, 20, "two cycles failed")
        finally:
            await processor.stop()
        assert all(isinstance(e, TopicNotFound) and str(e).startswith(
            "topic 'never-made' does not exist; create it first") for e in seen.cycle_errors()), \
            seen.errors

    asyncio.run(go())
