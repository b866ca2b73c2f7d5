"""A `compacted` topic (Kafka's cleanup.policy=compact) keeps the latest event per key.

Goal: Kafka's compaction guarantees on Keybus's log: a reader from the
earliest offset sees at least the latest event of every (source, key), in
offset order, with offsets unchanged; superseded events go; tombstones stay
until delete_retention_ms and then go from the log and the view; a
subscription (the dispatcher reads the rewritten, sparse records) gets the
same events as a read.
Method: a broker process checking retention every 50 ms and sweeping the
view every 100 ms; a compacted topic with a 1.5 s delete retention; three
rounds over 2,000 keys with deletes; poll DescribeTopic (bounded) until the
partition shrinks, then until the tombstones are swept.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from sdk import DELETE, Admin, Consumer, Producer, read_all
from sdk.core.columns import Event
from tests.support.bootstrap_model import (
    History,
    describe_partition,
    plan_events,
    produce_events,
    wait_for_partition,
)
from tests.support.broker_process import BrokerProcess

TOPIC = "compacted"


def _check_latest_kept(events: list[Event], history: History) -> None:
    offsets = [e.offset for e in events]
    assert offsets == sorted(set(offsets)), "order or offsets changed"
    by_offset = {e.offset: e for e in events}
    for (source, key), offset in history.offsets.items():
        if (source, key) in history.model:
            event = by_offset.get(offset)
            assert event is not None, f"latest event of {(source, key)} at {offset} is gone"
            assert (event.source, event.key, event.value) == (source, key,
                                                               history.model[(source, key)])


async def _subscribed(broker: str, last_offset: int) -> list[int]:
    offsets: list[int] = []
    async with await Consumer.subscribe(broker, TOPIC, "audit",
                                        start="earliest") as consumer:
        while not offsets or offsets[-1] < last_offset:
            batch = await consumer.receive_batch(timeout_s=30)
            offsets.extend(m.offset for m in batch.messages())
            consumer.ack_batch(batch)
    return offsets


async def _scenario(broker: str) -> None:
    history = History()
    async with Admin(broker) as admin:
        await admin.create_topic(TOPIC, compacted=True, delete_retention_ms=1_500)
    events = plan_events(random.Random(3), 2_000, 2, 0.0, "u")
    events += plan_events(random.Random(4), 2_000, 1, 0.2, "v")
    async with await Producer.create(broker, TOPIC) as producer:
        await produce_events(producer, events, history, chunk=400)
        full = (await describe_partition(broker, TOPIC)).bytes
        await wait_for_partition(broker, TOPIC, lambda p: p.bytes < full // 2, "compaction")
        compacted = await read_all(broker, TOPIC, 0)
        _check_latest_kept(compacted, history)
        assert len(compacted) < len(events) // 2
        # Compaction goes on meanwhile and only removes: what the subscription
        # gets lies between a read before it and a read after it.
        subscribed = set(await _subscribed(broker, compacted[-1].offset))
        after = {e.offset for e in await read_all(broker, TOPIC, 0)}
        assert after <= subscribed <= {e.offset for e in compacted}

        await wait_for_partition(broker, TOPIC, lambda p: p.view_tombstones == 0,
                                 "the sweep of tombstones past delete retention")
        await producer.send(0, b"tick", source="other")  # a newer record, so the head may go
        await producer.flush()
        deleted = len(history.offsets) - len(history.model)
        await wait_for_partition(broker, TOPIC, lambda p: p.view_keys == len(history.model) + 1,
                                 "the view of the new record")
        await asyncio.sleep(0.3)  # a few more compaction rounds (50 ms each)
        swept = await read_all(broker, TOPIC, 0)
    assert deleted > 0
    _check_latest_kept(swept, history)
    assert not [e for e in swept if e.opcode == DELETE], "tombstones outlived delete retention"


def test_compacted_topic_keeps_latest_per_key_and_drops_old_tombstones(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", "--retention-check-interval-ms", "50",
                           "--view-sweep-interval-ms", "100")
    broker.start()
    try:
        asyncio.run(_scenario(broker.address))
    finally:
        broker.stop()
