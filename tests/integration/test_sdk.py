"""The SDK producer and reader against a real broker that crashes.

Goal: what the SDK promises users: every event sent is stored exactly once
even when the broker is SIGKILLed mid-stream (idempotent retries), each
event's future gives its real offset, send order is offset order per
partition, and a following reader survives a broker restart.
Method: an async Producer sends while a task kills and restarts the broker
three times (timings seeded, seed printed); then a Reader reads everything
back and the test compares keys, counts and offsets.
"""

from __future__ import annotations

import asyncio
import collections
import random
from pathlib import Path

from sdk import Admin, Producer, Reader, read_all
from tests.support.broker_process import BrokerProcess

EVENTS = 60_000


async def _produce_through_crashes(broker: BrokerProcess, rng: random.Random) -> list[object]:
    async with Admin(broker.address) as admin:
        await admin.create_topic("exactly-once", partitions=2)
    producer = await Producer.create(broker.address, "exactly-once", delivery_timeout_ms=60_000)

    async def crashes() -> None:
        for _ in range(3):
            await asyncio.sleep(rng.uniform(0.1, 0.4))
            await asyncio.to_thread(broker.kill)
            await asyncio.sleep(rng.uniform(0.05, 0.3))
            await asyncio.to_thread(broker.start)

    chaos = asyncio.create_task(crashes())
    futures = []
    for i in range(EVENTS):
        futures.append(await producer.send(i, b"%d" % i))
        if i % 1000 == 0:
            await asyncio.sleep(0.002)  # pace, so the crashes land mid-stream
    await chaos
    await producer.flush()
    results = [await f for f in futures]
    await producer.close()
    return results


def test_producer_stores_every_event_exactly_once_across_kills(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        results = asyncio.run(_produce_through_crashes(broker, random.Random(seed)))
        stored = collections.Counter()
        offsets: dict[tuple[int, int], int | str] = {}
        for partition in (0, 1):
            for event in asyncio.run(read_all(broker.address, "exactly-once", partition)):
                stored[event.key] += 1
                offsets[(partition, event.offset)] = event.key
    finally:
        broker.stop()
    assert len(stored) == EVENTS, f"seed {seed}: {EVENTS - len(stored)} events missing"
    assert max(stored.values()) == 1, f"seed {seed}: duplicates stored"
    last: dict[int, int] = {}
    for key, result in enumerate(results):
        assert offsets[(result.partition, result.offset)] == key, f"seed {seed}: wrong offset"
        assert result.offset > last.get(result.partition, -1), f"seed {seed}: order broken"
        last[result.partition] = result.offset


async def _follow(broker: BrokerProcess, expected: int) -> list[int]:
    seen: list[int] = []
    async with Reader(broker.address, "follow", 0, follow=True) as reader:
        async for batch in reader:
            seen.extend(batch.offsets)
            if len(seen) >= expected:
                return seen
    return seen


def test_following_reader_survives_a_broker_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()

    async def scenario() -> list[int]:
        async with Admin(broker.address) as admin:
            await admin.create_topic("follow")
        follower = asyncio.create_task(_follow(broker, 3_000))
        for round_ in range(3):
            async with await Producer.create(broker.address, "follow") as producer:
                for i in range(1_000):
                    await producer.send(round_ * 1_000 + i, b"x")
                await producer.flush()
            if round_ < 2:
                await asyncio.to_thread(broker.kill)
                await asyncio.to_thread(broker.start)
        return await asyncio.wait_for(follower, 60)

    try:
        seen = asyncio.run(scenario())
    finally:
        broker.stop()
    assert seen == list(range(3_000))
