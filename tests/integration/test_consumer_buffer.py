"""A consumer of many partitions buffers at most `receiver_queue_total_max` events.

Goal: permits are granted per partition, so a consumer that subscribes to a
topic of many partitions with a backlog and does not keep up received up to
`receiver_queue_size` events of every partition: 252,709 events (282 MB of its
process) from a 256-partition topic while the application took one batch. Now
all partitions share `receiver_queue_total_max` (as Pulsar's
maxTotalReceiverQueueSizeAcrossPartitions) and everything is still delivered,
once, when the application takes it.

Method: a real broker process, a topic of 64 partitions with 12,800 events, a
Key_Shared consumer with a total of 640 (10 per partition) that takes one batch
and waits, its buffer looked at; then it takes and acknowledges everything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from keybus import Admin, Consumer, Producer
from tests.support.broker_process import BrokerProcess

PARTITIONS = 64
EVENTS = 12_800


@pytest.fixture()
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", "--no-fsync", "--no-view-default")
    process.start()
    yield process
    process.stop()


def test_a_consumer_of_many_partitions_buffers_within_its_total(broker: BrokerProcess) -> None:
    async def body() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("wide", partitions=PARTITIONS)
        async with await Producer.create(broker.address, "wide") as producer:
            await asyncio.gather(*[await producer.send(i, b"v" * 100, ordering_key=str(i))
                                   for i in range(EVENTS)])
        consumer = await Consumer.subscribe(broker.address, "wide", "s", type="key_shared",
                                            start="earliest", receiver_queue_total_max=640)
        async with consumer:
            seen = [int(m.key) for m in (await consumer.receive_batch(20)).messages()]
            await asyncio.sleep(2)  # the broker sends what the permits allow
            buffered = consumer._state.buffer.buffered_events
            assert 0 < buffered <= 640, buffered
            while len(seen) < EVENTS:
                batch = await consumer.receive_batch(20)
                seen += [int(m.key) for m in batch.messages()]
                consumer.ack_batch(batch)
            assert sorted(seen) == list(range(EVENTS))

    asyncio.run(body())
