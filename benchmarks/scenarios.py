"""Benchmark scenarios: produce and read through the SDK against a real broker.

Each scenario takes its parameters as a dataclass and returns a result dict
(events/s, MB/s, seconds, parameters). The broker runs in its own process;
the scenario's client runs in this one, so each has a core of its own on a
2-core machine.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

from sdk import Admin, Producer, Reader


@dataclass(frozen=True)
class Workload:
    events: int = 1_000_000
    value_bytes: int = 100
    keys: int = 10_000
    batch_events: int = 1_000
    fsync: bool = True
    partitions: int = 1


def _keys(workload: Workload, seed: int = 7) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(workload.keys) for _ in range(min(workload.events, 100_000))]


async def produce(broker: str, workload: Workload, topic: str = "bench",
                  create: bool = True) -> dict[str, Any]:
    """One SDK Producer, `send()` per event, until every event is acknowledged
    (create=False: the topic exists already)."""
    if create:
        async with Admin(broker) as admin:
            await admin.create_topic(topic, partitions=workload.partitions)
    value = os.urandom(workload.value_bytes)
    keys = _keys(workload)
    n_keys = len(keys)
    async with await Producer.create(broker, topic, batch_events_max=workload.batch_events) as producer:
        began = time.perf_counter()
        send = producer.send
        for i in range(workload.events):
            await send(keys[i % n_keys], value)
        await producer.flush()
        seconds = time.perf_counter() - began
    return _result("produce", workload, seconds)


async def read(broker: str, workload: Workload, topic: str = "bench") -> dict[str, Any]:
    """One Reader over partition 0 from the earliest offset, counting events."""
    count = 0
    began = time.perf_counter()
    async with Reader(broker, topic, 0, stop_offset=workload.events) as reader:
        async for batch in reader:
            count += batch.count
    seconds = time.perf_counter() - began
    assert count == workload.events, (count, workload.events)
    return _result("read", workload, seconds)


async def filtered_read(broker: str, workload: Workload, topic: str = "bench") -> dict[str, Any]:
    """A read that passes 10% of events (MOD 10, bucket 3) filtered in the broker."""
    count = 0
    began = time.perf_counter()
    async with Reader(broker, topic, 0, stop_offset=workload.events,
                      key_filter="mod:10:[3]") as reader:
        async for batch in reader:
            count += batch.count
    seconds = time.perf_counter() - began
    result = _result("read, filtered to 10% (mod:10:[3])", workload, seconds)
    result["events_delivered"] = count
    return result


def _result(scenario: str, workload: Workload, seconds: float) -> dict[str, Any]:
    return {
        "scenario": scenario,
        **asdict(workload),
        "seconds": round(seconds, 3),
        "events_per_s": round(workload.events / seconds),
        "mb_per_s": round(workload.events * workload.value_bytes / seconds / 1e6, 1),
    }

