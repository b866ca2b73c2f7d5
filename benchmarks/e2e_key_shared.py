"""End to end Key_Shared: produce -> deliver -> ack, consumers in separate processes.

Two phases per consumer count (1 and 4 Key_Shared consumers, auto-split):
* throughput: EVENTS events (100-byte values, 10,000 keys) are stored
  first; the consumers then subscribe from the earliest offset, and the
  clock runs until the subscription's mark-delete reaches the end (every
  event delivered and acknowledged): events/s.
* latency: with the consumers attached at the tail, a producer publishes
  at RATE events/s for SECONDS; each consumer records, per delivered record
  (the events of one produce call), its
  arrival time minus the broker's publish_time_ms (publish-to-delivery,
  ms; publish_time_ms has 1 ms resolution, so figures carry up to +1 ms).

Usage: python -m benchmarks.e2e_key_shared [--events N] [--rate R] [--seconds S]
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import time
from typing import Any

from benchmarks.broker import running_broker
from benchmarks.machine import describe
from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.producer import Producer
from sdk.subscription_admin import SubscriptionAdmin

KEYS = 10_000
VALUE = b"x" * 100


def consumer_process(address: str, topic: str, name: str, start: str, stop_at: float,
                     stop: Any, out: Any) -> None:
    """Consume and ack until stop_at (wall clock); send back latency samples."""
    import uvloop

    async def run() -> None:
        consumer = await Consumer.subscribe(address, topic, "bench", type="key_shared",
                                            consumer_name=name, initial_position=start,
                                            receiver_queue_size=5000)
        latencies: list[float] = []
        events = 0
        while time.time() < stop_at and not stop.is_set():
            try:
                batch = await consumer.receive_batch(0.2)
            except TimeoutError:
                continue
            now_ms = time.time() * 1000
            latencies.append(now_ms - batch.record.publish_time_ms)
            events += batch.count
            consumer.ack_batch(batch)
        await consumer.close()
        out.put({"name": name, "events": events, "latencies": latencies})

    uvloop.run(run())


async def produce_all(address: str, topic: str, events: int) -> None:
    producer = await Producer.create(address, topic, batch_events_max=5000, linger_ms=5)
    rnd = random.Random(1)
    chunk = 5000
    for start in range(0, events, chunk):
        n = min(chunk, events - start)
        await producer.send_batch([rnd.randrange(KEYS) for _ in range(n)], [VALUE] * n)
    await producer.flush()
    await producer.close()


async def produce_at_rate(address: str, topic: str, rate: int, seconds: float) -> int:
    producer = await Producer.create(address, topic, linger_ms=1)
    rnd = random.Random(2)
    tick_s = 0.01
    per_tick = max(1, int(rate * tick_s))
    sent = 0
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        await producer.send_batch([rnd.randrange(KEYS) for _ in range(per_tick)],
                                  [VALUE] * per_tick)
        sent += per_tick
        delay = began + sent / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    await producer.flush()
    await producer.close()
    return sent


async def wait_drained(address: str, topic: str, timeout_s: float) -> float:
    began = time.monotonic()
    async with SubscriptionAdmin(address) as admin:
        while time.monotonic() - began < timeout_s:
            try:
                info = await admin.describe_subscription(topic, "bench")
            except Exception:
                await asyncio.sleep(0.05)
                continue
            if all(p.mark_delete == p.end_offset for p in info.partitions):
                return time.monotonic() - began
            await asyncio.sleep(0.02)
    raise TimeoutError("the consumers did not drain the topic")


async def wait_attached(address: str, topic: str, consumers: int, timeout_s: float) -> None:
    """Wait until `consumers` consumers are attached (the subscription starts at the tail)."""
    began = time.monotonic()
    async with SubscriptionAdmin(address) as admin:
        while time.monotonic() - began < timeout_s:
            try:
                info = await admin.describe_subscription(topic, "bench")
                if len(info.partitions[0].consumers) == consumers:
                    return
            except Exception:
                pass
            await asyncio.sleep(0.05)
    raise TimeoutError("the consumers did not attach")


def start_consumers(address: str, topic: str, count: int, start: str, stop_at: float
                    ) -> tuple[list[Any], Any]:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    stop = context.Event()
    processes = [context.Process(target=consumer_process,
                                 args=(address, topic, f"c{i}", start, stop_at, stop, out))
                 for i in range(count)]
    for process in processes:
        process.start()
    return processes, (out, stop)


def collect(processes: list[Any], channels: Any) -> list[dict[str, Any]]:
    out, stop = channels
    time.sleep(2)  # the last events reach the consumers
    stop.set()
    results = [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(30)
    return results


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def admin_create(address: str, topic: str) -> None:
    async with Admin(address) as admin:
        await admin.create_topic(topic)


def run_case(address: str, consumers: int, events: int, rate: int, seconds: float
             ) -> dict[str, Any]:
    topic = f"e2e-{consumers}"
    asyncio.run(admin_create(address, topic))
    asyncio.run(produce_all(address, topic, events))
    stop_at = time.time() + 300
    processes, out = start_consumers(address, topic, consumers, "earliest", stop_at)
    drained_s = asyncio.run(wait_drained(address, topic, 280))
    for process in processes:
        process.terminate()
    throughput = events / drained_s
    # latency at a fixed rate, consumers attached at the tail
    topic = f"e2e-latency-{consumers}"
    asyncio.run(admin_create(address, topic))
    stop_at = time.time() + seconds + 60
    processes, out = start_consumers(address, topic, consumers, "latest", stop_at)
    asyncio.run(wait_attached(address, topic, consumers, 60))
    sent = asyncio.run(produce_at_rate(address, topic, rate, seconds))
    results = collect(processes, out)
    latencies = [v for r in results for v in r["latencies"]]
    return {"consumers": consumers, "events": events,
            "throughput_events_per_s": round(throughput), "drain_s": round(drained_s, 2),
            "latency_rate_events_per_s": rate, "latency_events_sent": sent,
            "latency_events_received": sum(r["events"] for r in results),
            "latency_ms_p50": round(percentile(latencies, 0.50), 2),
            "latency_ms_p99": round(percentile(latencies, 0.99), 2),
            "latency_samples": len(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--fsync", action="store_true", help="fsync per produce batch")
    options = parser.parse_args()
    extra = () if options.fsync else ("--no-fsync",)
    cases = []
    with running_broker(*extra) as (address, _pid):
        for consumers in (1, 4):
            cases.append(run_case(address, consumers, options.events, options.rate,
                                  options.seconds))
    print(json.dumps({"benchmark": "e2e_key_shared", "machine": describe(),
                      "fsync": options.fsync, "value_bytes": len(VALUE), "keys": KEYS,
                      "cases": cases}, indent=2))


if __name__ == "__main__":
    main()
