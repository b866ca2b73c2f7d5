"""The physical floor a publish-to-delivery latency is judged against.

Two figures, measured in the same run as the systems:

- the disk: append 4 KiB to a file in the data directory's file system and
  fsync it, one at a time (what a durable produce costs at least: the broker
  acknowledges after its WriteBatch's WAL is synced);
- the network stack: one unary gRPC call on 127.0.0.1 to a broker's standard
  health service, one at a time (what one hop through Python gRPC costs at
  least; an event crosses two: producer to broker, broker to consumer).

Both record into an HdrHistogram in microseconds.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from typing import Any

from hdrh.histogram import HdrHistogram

from benchmarks.histogram import figures_ms, histogram, record_us

APPEND_BYTES = 4096


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
