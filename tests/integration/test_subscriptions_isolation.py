"""A stalled consumer or a hot key slows only its own slots (issue 9, Must show (2), (3)).

Goal: (2) one of four Key_Shared consumers stops taking events for good (it stays
connected) while a 200,000-event backlog drains: the three others receive all of
their keys' events at >= 80% of the rate they get when all four are healthy, and
the broker's RSS stays within RSS_GROWTH_BYTES_MAX of what it was before the drain;
(3) a key with half the traffic whose consumer is slow: the other keys' rate stays
>= 80% of their rate on a topic without the hot key, over the whole run and over
its last 10 seconds.

Method: a broker process of its own; SDK consumers in this process. Every rate is
compared with a baseline measured in the same test, as a ratio. The healthy
consumers are paced (PACE_EVENTS_S each: an application doing work per event), so
the ratio measures isolation, not how the load of other processes on the machine
shares two cores between the runs; an unpaced stalled partition (the defect) drops
them to a few percent. RSS is sampled from /proc every 100 ms.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.core.hashing import slot_of
from sdk.core.model import HashRange
from sdk.producer import Producer
from sdk.subscription_admin import SubscriptionAdmin
from tests.support.broker_process import BrokerProcess

BACKLOG = 200_000
KEYS = 2_000
# per healthy consumer in (2); low enough that the four consumers (one process) keep
# their pace on a slow, loaded machine: at 12,000 an Intel Xeon about 2.5 times slower
# than the usual AMD EPYC, at a load of 8, ran out of CPU (0.75 of the healthy rate)
PACE_EVENTS_S = 6_000
RSS_GROWTH_BYTES_MAX = 64 << 20  # the record cache (16 MiB) and allocator slack
HOT_RUN_S = 16.0
OTHER_EVENTS_S = 3_000  # the other keys' production in (3); the hot key produces as much
HOT_CONSUMER_EVENTS_S = 100


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> BrokerProcess:
    process = BrokerProcess(tmp_path_factory.mktemp("isolation") / "data", "--no-fsync")
    process.start()
    yield process  # type: ignore[misc]
    process.stop()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def sample_rss(pid: int, peak: list[int]) -> None:
    while True:
        peak[0] = max(peak[0], rss_bytes(pid))
        await asyncio.sleep(0.1)


def owns(ranges: Sequence[HashRange], slot: int) -> bool:
    return any(r.slot_first <= slot <= r.slot_last for r in ranges)


async def paced(consumer: Consumer, expected: int, rate: float, finished: list[float],
                stop_after: int | None = None) -> None:
    """Receive and ack `expected` events at most `rate` per second; record when done.
    With `stop_after`, stop taking events for good after that many (stay attached)."""
    began = time.monotonic()
    got = 0
    while got < expected:
        if stop_after is not None and got >= stop_after:
            await asyncio.sleep(3600)
        batch = await consumer.receive_batch(30)
        got += batch.count
        consumer.ack_batch(batch)
        ahead = began + got / rate - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)
    finished.append(time.monotonic())


async def drain_with(address: str, subscription: str, keys: list[int], stalled: bool,
                     pid: int) -> tuple[float, int]:
    """Four consumers drain the backlog (one stalls when `stalled`): the three others'
    events per second, and the broker's peak RSS growth during the drain."""
    consumers = [await Consumer.subscribe(address, "stall", subscription, type="key_shared",
                                          consumer_name=f"c{i}", receiver_queue_size=1000)
                 for i in range(4)]
    async with SubscriptionAdmin(address) as admin:
        async def covered() -> bool:
            info = await admin.describe_subscription("stall", subscription)
            return len(info.partitions[0].consumers) == 4 and all(
                c.ranges for c in info.partitions[0].consumers)
        deadline = time.monotonic() + 10
        while not await covered():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        info = await admin.describe_subscription("stall", subscription)
        ranges = {c.name: [HashRange(r.slot_first, r.slot_last) for r in c.ranges]
                  for c in info.partitions[0].consumers}
        counts = {name: sum(1 for k in keys if owns(r, slot_of(k))) for name, r in ranges.items()}
        before = rss_bytes(pid)
        peak = [before]
        sampler = asyncio.create_task(sample_rss(pid, peak))
        finished: list[float] = []
        began = time.monotonic()
        await admin.seek("stall", subscription, "earliest")
        tasks = [asyncio.create_task(paced(c, counts[c.name], PACE_EVENTS_S, finished,
                                           stop_after=1 if stalled and i == 0 else None))
                 for i, c in enumerate(consumers)]
        others = tasks[1:]
        await asyncio.wait_for(asyncio.gather(*others), 120)
        elapsed = max(finished) - began
        sampler.cancel()
        tasks[0].cancel()
        await asyncio.gather(tasks[0], sampler, return_exceptions=True)
    for consumer in consumers:
        await consumer.close()
    events = sum(counts[c.name] for c in consumers[1:])
    return events / elapsed, peak[0] - before


def test_stalled_consumer_does_not_slow_the_others(broker: BrokerProcess) -> None:
    rnd = random.Random(9)
    keys = [rnd.randrange(KEYS) for _ in range(BACKLOG)]

    async def go() -> None:
        address = broker.address
        async with Admin(address) as admin:
            await admin.create_topic("stall")
        async with await Producer.create(address, "stall", batch_events_max=5000) as producer:
            for start in range(0, BACKLOG, 5000):
                await producer.send_batch(keys[start:start + 5000], [b"x" * 100] * 5000)
            await producer.flush()
        pid = broker.process.pid  # type: ignore[union-attr]
        healthy_rate, healthy_growth = await drain_with(address, "healthy", keys, False, pid)
        stalled_rate, growth = await drain_with(address, "stalled", keys, True, pid)
        print(f"others' rate: healthy {healthy_rate:,.0f}/s, one stalled {stalled_rate:,.0f}/s "
              f"({stalled_rate / healthy_rate:.2f}x); broker RSS growth {growth >> 20} MiB "
              f"(healthy drain: {healthy_growth >> 20} MiB), RSS {rss_bytes(pid) >> 20} MiB")
        assert stalled_rate >= 0.8 * healthy_rate, (
            f"the three healthy consumers got {stalled_rate:,.0f} events/s with one stalled, "
            f"{healthy_rate:,.0f} with all four healthy")
        assert growth <= RSS_GROWTH_BYTES_MAX, f"broker RSS grew {growth >> 20} MiB"

    asyncio.run(go())


# ---------------------------------------------------------------- (3) a hot key


async def produce_at(address: str, topic: str, keys: list[int], rate: float,
                     seconds: float) -> None:
    """Produce `rate` events per second drawn from `keys` for `seconds`."""
    rnd = random.Random(topic)
    async with await Producer.create(address, topic, linger_ms=1) as producer:
        began = time.monotonic()
        sent = 0
        while (now := time.monotonic()) - began < seconds:
            due = int((now - began) * rate) - sent
            if due > 0:
                await producer.send_batch([rnd.choice(keys) for _ in range(due)], [b"x"] * due)
                sent += due
            await asyncio.sleep(0.01)
        await producer.flush()


async def receive_times(consumer: Consumer, times: list[float], per_event_s: float) -> None:
    while True:
        try:
            batch = await consumer.receive_batch(1.0)
        except TimeoutError:
            continue
        now = time.monotonic()
        times.extend([now] * batch.count)
        if per_event_s:
            for message in batch.messages():
                await asyncio.sleep(per_event_s)
                consumer.ack(message)
        else:
            consumer.ack_batch(batch)


def test_hot_key_does_not_slow_the_other_keys(broker: BrokerProcess) -> None:
    hot = next(k for k in range(10_000) if 20_000 < slot_of(k) < 40_000)
    hot_slot = slot_of(hot)
    others = [k for k in range(10_000, 10_400) if slot_of(k) != hot_slot]
    low, high = f"0-{hot_slot - 1}", f"{hot_slot + 1}-65535"

    async def run_topic(topic: str, with_hot: bool, base: float) -> tuple[list[float], list[float]]:
        address = broker.address
        async with Admin(address) as admin:
            await admin.create_topic(topic)
        attach = [("low", low, 0.0), ("high", high, 0.0), ("hot", f"{hot_slot}-{hot_slot}",
                                                             1 / HOT_CONSUMER_EVENTS_S)]
        consumers, tasks = [], []
        times: dict[str, list[float]] = {"low": [], "high": [], "hot": []}
        for name, ranges, per_event_s in attach:
            consumer = await Consumer.subscribe(address, topic, "s", type="key_shared",
                                                mode="sticky", ranges=ranges,
                                                consumer_name=name, receiver_queue_size=100)
            consumers.append(consumer)
            tasks.append(asyncio.create_task(receive_times(consumer, times[name], per_event_s)))
        producers = [produce_at(address, topic, others, OTHER_EVENTS_S, HOT_RUN_S)]
        if with_hot:
            producers.append(produce_at(address, topic, [hot], OTHER_EVENTS_S, HOT_RUN_S))
        await asyncio.gather(*producers)
        await asyncio.sleep(1.0)  # what was produced last is delivered
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for consumer in consumers:
            await consumer.close()
        return times["low"] + times["high"], times["hot"]

    async def go() -> None:
        base = time.monotonic()
        (plain, _), (busy, hot_times) = await asyncio.gather(
            run_topic("plain", False, base), run_topic("hot", True, base))
        assert hot_times, "the hot key's consumer received nothing"
        stop = base + HOT_RUN_S
        for name, start in (("whole run", base + 1.0), ("last 10 s", stop - 10.0)):
            plain_n = sum(1 for t in plain if start <= t < stop)
            busy_n = sum(1 for t in busy if start <= t < stop)
            print(f"{name}: other keys {busy_n} events with the hot key, {plain_n} without")
            assert busy_n >= 0.8 * plain_n, (
                f"{name}: the other keys got {busy_n} events beside a hot key, {plain_n} "
                f"without it")

    asyncio.run(go())
