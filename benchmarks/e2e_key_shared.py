"""End to end Key_Shared: produce -> deliver -> ack, consumers in separate processes.

Three phases per consumer count (default 1 and 4 Key_Shared consumers,
auto-split), each on its own topic with one partition:

* steady (the headline throughput): EVENTS events (100-byte values,
  10,000 keys) are stored first; the N consumers attach at the tail (nothing
  to deliver yet) and only once all N are attached does a seek to the
  earliest offset release the stored events to all of them at once. Timed
  from the seek to the last ack (the subscription's mark-delete reaches the
  end): events/s with a fixed membership.
* with_joins: EVENTS events are stored; the consumers (processes already
  started, so start-up is not counted) subscribe from the earliest offset
  one at a time, JOIN_MS apart, while the first ones drain: slots move and
  a moved slot waits for its old owner's acks. Timed from the first attach
  to the last ack.
* latency: with the consumers attached at the tail, a producer publishes
  at RATE events/s for SECONDS; each consumer records, per delivered record
  (the events of one produce call), its arrival time minus the broker's
  publish_time_ms (publish-to-delivery, ms; publish_time_ms has 1 ms
  resolution, so figures carry up to +1 ms).

Each phase reports how many events every consumer received (the balance),
and the latency phase how many of the sent events arrived.

`prepare` and `consume` at the end make this module the "Keybus Key_Shared"
client of `python -m benchmarks compare` (see benchmarks/keybus_e2e.py and
benchmarks/keybus_subscribe.py): there the timing, payload stamps and CPU
accounting are the harness's, the same as for Redis and NATS.

Usage: python -m benchmarks.e2e_key_shared [--events N] [--rate R] [--seconds S]
       [--consumers 1,4] [--join-ms MS] [--fsync] [--profile]
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import time
from pathlib import Path
from typing import Any

from benchmarks import keybus_subscribe
from benchmarks.broker import running_broker
from benchmarks.link import Link, Task
from benchmarks.machine import describe
from benchmarks.measurement import CompareWorkload
from benchmarks.profiling import broker_profiled
from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.producer import Producer
from sdk.subscription_admin import SubscriptionAdmin

OUT = Path(__file__).resolve().parent / "out"
KEYS = 10_000
VALUE = b"x" * 100
SUBSCRIPTION = "bench"
RECEIVER_QUEUE_SIZE = 5000
POLL_S = 0.01
METHODS = {
    "steady": "all consumers attached at the tail before the timed phase; a seek to the "
              "earliest offset releases the stored events to all of them at once; timed from "
              "the seek to the last ack",
    "with_joins": "consumers subscribe from the earliest offset one at a time, join_ms apart, "
                  "while the first ones drain; timed from the first attach to the last ack",
    "latency": "consumers attached at the tail; publish at a fixed rate; per delivered record "
               "arrival time minus the broker's publish_time_ms (1 ms resolution)",
}


def consumer_process(address: str, topic: str, name: str, start: str, stop_at: float,
                     go: Any, stop: Any, out: Any) -> None:
    """Once `go` is set, subscribe; consume and ack until `stop` is set or stop_at
    (wall clock); send back latency samples."""
    import uvloop

    from sdk.security import ClientSecurity, use

    use(ClientSecurity.from_env())  # TLS and token when the run sets them (benchmarks/secure.py)
    go.wait()

    async def run() -> None:
        consumer = await Consumer.subscribe(address, topic, SUBSCRIPTION, type="key_shared",
                                            consumer_name=name, start=start,
                                            receiver_queue_size=RECEIVER_QUEUE_SIZE)
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


async def _describe(admin: SubscriptionAdmin, topic: str) -> Any:
    try:
        return await admin.describe_subscription(topic, SUBSCRIPTION)
    except Exception:  # not created yet by the first consumer
        return None


def _drained(info: Any) -> bool:
    return info is not None and all(p.mark_delete == p.end_offset for p in info.partitions)


async def wait_attached(address: str, topic: str, consumers: int, timeout_s: float) -> None:
    """Wait until `consumers` consumers are attached to every partition."""
    deadline = time.monotonic() + timeout_s
    async with SubscriptionAdmin(address) as admin:
        while time.monotonic() < deadline:
            info = await _describe(admin, topic)
            if info is not None and all(len(p.consumers) == consumers for p in info.partitions):
                return
            await asyncio.sleep(POLL_S)
    raise TimeoutError(f"{consumers} consumers did not attach within {timeout_s} s")


async def seek_and_drain(address: str, topic: str, timeout_s: float) -> float:
    """Seek the subscription to the earliest offset; seconds until every event is acked."""
    async with SubscriptionAdmin(address) as admin:
        began = time.monotonic()
        await admin.seek(topic, SUBSCRIPTION, "earliest")
        while time.monotonic() - began < timeout_s:
            if _drained(await _describe(admin, topic)):
                return time.monotonic() - began
            await asyncio.sleep(POLL_S)
    raise TimeoutError("the consumers did not drain the topic")


async def join_and_drain(address: str, topic: str, gos: list[Any], join_ms: int,
                         timeout_s: float) -> tuple[float, list[float]]:
    """Let the consumers subscribe one at a time, `join_ms` after the previous one
    attached; seconds from the first attach until every event is acked, and when
    (seconds after the first attach) each consumer attached."""
    deadline = time.monotonic() + timeout_s
    first: float | None = None
    joined: list[float] = []
    next_go = 0.0
    async with SubscriptionAdmin(address) as admin:
        while time.monotonic() < deadline:
            now = time.monotonic()
            if len(joined) < len(gos) and not gos[len(joined)].is_set() and now >= next_go:
                gos[len(joined)].set()
            info = await _describe(admin, topic)
            attached = min((len(p.consumers) for p in info.partitions), default=0) \
                if info is not None else 0
            now = time.monotonic()
            if attached > len(joined):
                first = now if first is None else first
                joined.append(round(now - first, 3))
                next_go = now + join_ms / 1000
            if first is not None and len(joined) == len(gos) and _drained(info):
                return now - first, joined
            await asyncio.sleep(POLL_S)
    raise TimeoutError("the consumers did not drain the topic")


def start_consumers(address: str, topic: str, count: int, start: str, stop_at: float,
                    together: bool = True) -> tuple[list[Any], Any, list[Any]]:
    """Start `count` consumer processes; they subscribe once their `go` event is set
    (at once when `together`). Returns (processes, channels, go events)."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    stop = context.Event()
    gos = [context.Event() for _ in range(count)]
    processes = [context.Process(target=consumer_process,
                                 args=(address, topic, f"c{i}", start, stop_at, gos[i], stop,
                                       out))
                 for i in range(count)]
    for process in processes:
        process.start()
    if together:
        for go in gos:
            go.set()
    return processes, (out, stop), gos


def collect(processes: list[Any], channels: Any, settle_s: float) -> list[dict[str, Any]]:
    """Stop the consumers after `settle_s` (the last events reach them); their results."""
    out, stop = channels
    time.sleep(settle_s)
    stop.set()
    results = [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(30)
    return sorted(results, key=lambda r: r["name"])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def admin_create(address: str, topic: str) -> None:
    async with Admin(address) as admin:
        await admin.create_topic(topic)


async def run_steady(address: str, consumers: int, events: int,
                     profile_pid: int = 0) -> dict[str, Any]:
    topic = f"e2e-steady-{consumers}"
    await admin_create(address, topic)
    await produce_all(address, topic, events)
    processes, channels, _ = start_consumers(address, topic, consumers, "latest",
                                             time.time() + 600)
    await wait_attached(address, topic, consumers, 60)
    with broker_profiled(profile_pid > 0, profile_pid, OUT / f"profile-e2e-key-shared-{consumers}"):
        drained_s = await seek_and_drain(address, topic, 300)
    results = await asyncio.to_thread(collect, processes, channels, 0.0)
    return {"events_per_s": round(events / drained_s), "drain_s": round(drained_s, 3),
            "events_per_consumer": [r["events"] for r in results]}


async def run_with_joins(address: str, consumers: int, events: int,
                         join_ms: int) -> dict[str, Any]:
    topic = f"e2e-joins-{consumers}"
    await admin_create(address, topic)
    await produce_all(address, topic, events)
    processes, channels, gos = start_consumers(address, topic, consumers, "earliest",
                                               time.time() + 600, together=False)
    await asyncio.sleep(1.0)  # the processes import and wait for their go: not timed
    drained_s, joined_s = await join_and_drain(address, topic, gos, join_ms, 300)
    results = await asyncio.to_thread(collect, processes, channels, 0.0)
    return {"events_per_s": round(events / drained_s), "drain_s": round(drained_s, 3),
            "join_ms": join_ms, "attached_at_s": joined_s,
            "events_per_consumer": [r["events"] for r in results]}


async def run_latency(address: str, consumers: int, rate: int,
                      seconds: float) -> dict[str, Any]:
    topic = f"e2e-latency-{consumers}"
    await admin_create(address, topic)
    processes, channels, _ = start_consumers(address, topic, consumers, "latest",
                                             time.time() + seconds + 120)
    await wait_attached(address, topic, consumers, 60)
    sent = await produce_at_rate(address, topic, rate, seconds)
    results = await asyncio.to_thread(collect, processes, channels, 2.0)
    latencies = [v for r in results for v in r["latencies"]]
    return {"rate_events_per_s": rate, "events_sent": sent,
            "events_received": sum(r["events"] for r in results),
            "events_per_consumer": [r["events"] for r in results],
            "ms_p50": round(percentile(latencies, 0.50), 2),
            "ms_p99": round(percentile(latencies, 0.99), 2),
            "ms_max": round(max(latencies, default=0.0), 2), "samples": len(latencies)}


async def run_cases(address: str, options: argparse.Namespace,
                    broker_pid: int = 0) -> list[dict[str, Any]]:
    """Every phase of every consumer count, in one event loop; with --profile, py-spy
    records the broker from the seek to the last ack of the steady phase with 4 consumers."""
    cases = []
    for consumers in (int(n) for n in options.consumers.split(",")):
        profile = options.profile and consumers == 4 and broker_pid > 0
        steady = await run_steady(address, consumers, options.events,
                                  broker_pid if profile else 0)
        cases.append({
            "consumers": consumers, "events": options.events,
            "steady": steady,
            "with_joins": await run_with_joins(address, consumers, options.events,
                                               options.join_ms),
            "latency": await run_latency(address, consumers, options.rate, options.seconds)})
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--consumers", default="1,4", help="comma-separated consumer counts")
    parser.add_argument("--join-ms", type=int, default=250,
                        help="with_joins: ms between one consumer attaching and the next joining")
    parser.add_argument("--fsync", action="store_true", help="fsync per produce batch")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy the broker during the 4-consumer steady drain; writes "
                             "benchmarks/out/profile-e2e-key-shared-4-broker.{raw,txt}")
    options = parser.parse_args()
    extra = () if options.fsync else ("--no-fsync",)
    OUT.mkdir(exist_ok=True)
    with running_broker(*extra) as (address, pid):
        cases = asyncio.run(run_cases(address, options, pid))
    print(json.dumps({"benchmark": "e2e_key_shared", "machine": describe(),
                      "fsync": options.fsync, "value_bytes": len(VALUE), "keys": KEYS,
                      "receiver_queue_size": RECEIVER_QUEUE_SIZE, "join_ms": options.join_ms,
                      "methods": METHODS,
                      "cases": cases}, indent=2))


def prepare(address: str, topic: str, workload: CompareWorkload) -> None:
    """The comparison's Key_Shared subscription (in the workload's mode), cursor at the
    topic's end."""
    keybus_subscribe.prepare(address, topic, "key_shared", workload)


def consume(task: Task, link: Link) -> dict[str, Any]:
    """A comparison consumer process on the Key_Shared subscription."""
    return keybus_subscribe.consume(task, link, "key_shared")


if __name__ == "__main__":
    main()
