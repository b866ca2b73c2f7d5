"""The dispatchers' record caches stay within one broker-wide budget.

Goal: a broker's memory for records its dispatchers keep read does not grow
with partitions times subscriptions. Before the budget each dispatcher kept up
to 16 MiB: one Key_Shared subscription with stalled consumers on a
64-partition topic took a broker from 190 MB to 1 GB of RSS. Now every
dispatcher keeps an equal share of `dispatch_cache_broker_bytes_max`, what the
dispatchers hold is reported (`keybus_dispatch_cache_bytes`), and a smaller
cache costs only reads: every event is still delivered, once, in order per key.

Method: a real broker process with a 4 MiB budget (metrics on), a topic of 8
partitions holding about 16 MB of events in records of 20 events, two
Key_Shared subscriptions whose consumers take what their permits allow and
stall (16 dispatchers: a share of 256 KiB each, where each would have kept
up to 16 MiB). While they stall, the gauge is sampled: within the budget and
not empty. Then the
consumers take and acknowledge everything: each subscription gets every event
once, in per-key order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from keybus import Admin, Consumer, Producer
from sdk.received import ReceivedBatch
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.metrics import gauge

BUDGET = 4 << 20
PARTITIONS = 8
EVENTS = 8_000
KEYS = 400
VALUE = 2_000


@pytest.fixture()
def broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, int]]:
    metrics_port = free_port()
    process = BrokerProcess(tmp_path / "data", "--no-fsync", "--metrics-port", str(metrics_port),
                            "--dispatch-cache-broker-bytes-max", str(BUDGET))
    process.start()
    yield process, metrics_port
    process.stop()


def cache_bytes(port: int) -> float:
    return gauge(port, "keybus_dispatch_cache_bytes")


async def produce(address: str) -> None:
    async with Admin(address) as admin:
        await admin.create_topic("big", partitions=PARTITIONS, view=False)
    # records of 20 events (about 40 KB): a share (256 KiB) holds some of them
    async with await Producer.create(address, "big", batch_events_max=20) as producer:
        futures = []
        for i in range(EVENTS):
            key = i % KEYS
            value = f"{i // KEYS}".encode().ljust(VALUE, b".")
            futures.append(await producer.send(key, value, ordering_key=str(key)))
        await asyncio.gather(*futures)


def note(seen: dict[int, list[int]], batch: ReceivedBatch) -> None:
    for message in batch.messages():
        seen.setdefault(int(message.key), []).append(int(message.value.rstrip(b".")))


async def take(consumer: Consumer, seen: dict[int, list[int]], until: int,
               deadline: float) -> None:
    """Receive and acknowledge until `seen` holds `until` events (or the deadline)."""
    while sum(map(len, seen.values())) < until and time.monotonic() < deadline:
        try:
            batch = await consumer.receive_batch(timeout_s=0.5)
        except TimeoutError:
            continue
        note(seen, batch)
        consumer.ack_batch(batch)


def test_dispatch_caches_stay_within_the_broker_budget(broker: tuple[BrokerProcess, int]
                                                       ) -> None:
    process, metrics_port = broker
    address = process.address

    async def body() -> None:
        await produce(address)
        consumers = {name: [await Consumer.subscribe(
            address, "big", name, type="key_shared", consumer_name=f"{name}{i}",
            start="earliest", receiver_queue_size=500) for i in range(2)]
            for name in ("s1", "s2")}
        try:
            seen: dict[str, dict[int, list[int]]] = {name: {} for name in consumers}
            for name, group in consumers.items():  # each takes one batch, then stalls
                for consumer in group:
                    batch = await consumer.receive_batch(timeout_s=10)
                    note(seen[name], batch)
                    consumer.ack_batch(batch)  # sent with the consumer's next flush
            await asyncio.sleep(1.0)  # the reads that fill the look-ahead end
            samples = []
            for _ in range(10):
                await asyncio.sleep(0.3)
                samples.append(cache_bytes(metrics_port))
            print(f"dispatch caches held {max(samples) / 2**20:.2f} MiB at most "
                  f"(budget {BUDGET / 2**20:.0f} MiB, {len(samples)} samples)")
            assert max(samples) > 0, "the stalled subscriptions keep nothing read"
            assert max(samples) <= BUDGET, samples
            deadline = time.monotonic() + 90
            for name, group in consumers.items():
                got = seen[name]
                await asyncio.gather(*(take(c, got, EVENTS, deadline) for c in group))
                # any order across keys; every event of each key once, in order
                assert got == {key: list(range(EVENTS // KEYS)) for key in range(KEYS)}, name
        finally:
            for group in consumers.values():
                for consumer in group:
                    await consumer.close()

    asyncio.run(body())
