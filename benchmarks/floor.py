"""The physical floor a publish-to-delivery latency is judged against.

Two figures, measured in the same run as the systems:

- the disk: append 4 KiB to a file in the data directory's file system and
  fsync it, one at a time (what a durable produce costs at least: the broker
  acknowledges after its WriteBatch's WAL is synced);
- the same disk under an ideal group commit (`disk_group_commit`): 4 KiB
  appends fsynced back to back for some seconds, and the wait of an event
  arriving at any moment of them: until the next fsync has started and ended.
  No broker that fsyncs before it acknowledges can do better on this disk.
  The two disk figures differ in the tail: the disk stalls now and then (on
  this machine one fdatasync in a few thousand takes 10-160 ms), a stall is
  one sample among thousands of fsyncs but it holds up every event that
  arrives during it, so the events' p99 sees it where the fsyncs' p99 does not;
- the network stack: one unary gRPC call on 127.0.0.1 to a broker's standard
  health service, one at a time (what one hop through Python gRPC costs at
  least; an event crosses two: producer to broker, broker to consumer).

Each records into an HdrHistogram in microseconds.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from hdrh.histogram import HdrHistogram

from benchmarks.histogram import figures_ms, histogram, record_us

APPEND_BYTES = 4096
ARRIVAL_STEP_US = 50  # the ideal group commit's events: one every 50 µs of the fsyncs' time


def disk_fsync(directory: str | None, samples: int) -> dict[str, Any]:
    """Append 4 KiB + fsync, `samples` times, in a temp file under `directory`."""
    hist = histogram()
    block = os.urandom(APPEND_BYTES)
    with tempfile.NamedTemporaryFile(dir=directory, prefix="keybus-floor-") as f:
        fd = f.fileno()
        for _ in range(samples):
            began = time.perf_counter_ns()
            os.write(fd, block)
            os.fsync(fd)
            record_us(hist, (time.perf_counter_ns() - began) / 1000)
    return {**figures_ms(hist), "directory": directory or tempfile.gettempdir(),
            "what": f"append {APPEND_BYTES} B + fsync"}


def group_commit_waits_us(spans: Sequence[tuple[int, int]], step_us: int) -> list[float]:
    """Waits of events arriving every `step_us` under fsyncs (start_ns, end_ns) run back to
    back: each waits until the first fsync starting at or after its arrival has ended (one
    arriving during an fsync waits for it and then for the next). Pure: the floor's core."""
    starts = [start for start, _ in spans]
    waits: list[float] = []
    if len(spans) < 2:
        return waits
    arrival, last = starts[0], starts[-1]  # after the last start no fsync would take it
    step_ns = step_us * 1000
    while arrival <= last:
        taken = bisect.bisect_left(starts, arrival)
        waits.append((spans[taken][1] - arrival) / 1000)
        arrival += step_ns
    return waits


def disk_group_commit(directory: str | None, seconds: float) -> dict[str, Any]:
    """Append 4 KiB + fsync back to back for `seconds`; the waits of events arriving
    evenly over that time (`group_commit_waits_us`), and the slowest fsync."""
    block = os.urandom(APPEND_BYTES)
    spans: list[tuple[int, int]] = []
    with tempfile.NamedTemporaryFile(dir=directory, prefix="keybus-floor-") as f:
        fd = f.fileno()
        stop = time.monotonic_ns() + int(seconds * 1e9)
        while (began := time.monotonic_ns()) < stop:
            os.write(fd, block)
            os.fsync(fd)
            spans.append((began, time.monotonic_ns()))
    hist = histogram()
    for wait in group_commit_waits_us(spans, ARRIVAL_STEP_US):
        record_us(hist, wait)
    slowest = max((end - start for start, end in spans), default=0)
    return {**figures_ms(hist), "fsyncs": len(spans), "slowest_fsync_ms": round(slowest / 1e6, 3),
            "seconds": seconds, "directory": directory or tempfile.gettempdir(),
            "what": f"ideal group commit: {APPEND_BYTES} B appends fsynced back to back for "
                    f"{seconds:g} s, an event every {ARRIVAL_STEP_US} µs waits for the next "
                    "fsync to start and end"}


async def _grpc_round_trips(address: str, samples: int) -> HdrHistogram:
    import grpc.aio
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    hist = histogram()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="")
        for _ in range(min(100, samples)):  # warm the channel up
            await stub.Check(request, timeout=10)
        for _ in range(samples):
            began = time.perf_counter_ns()
            await stub.Check(request, timeout=10)
            record_us(hist, (time.perf_counter_ns() - began) / 1000)
    return hist


def grpc_round_trip(address: str, samples: int) -> dict[str, Any]:
    """`samples` sequential health checks against the broker at `address` (127.0.0.1)."""
    hist = asyncio.run(_grpc_round_trips(address, samples))
    return {**figures_ms(hist), "what": "unary gRPC health check, 127.0.0.1, one at a time"}
