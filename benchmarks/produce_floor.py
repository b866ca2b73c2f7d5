"""The broker's floor per produce request: grpcio's asyncio stack alone.

A server process answers each message of a bidirectional stream with one
message (as the broker answers each produce request), on uvloop as the broker
runs; a client process sends one small message and waits for its answer, once
per millisecond. `--mode` says what the server does before it answers:

- `echo`: nothing (what a request and its answer cost in grpcio alone);
- `thread`: a hop to a worker thread and back (`asyncio.to_thread`, as the
  broker's group commit does for its fsync);
- `fsync`: on that thread, append the message to a file and fsync it.

Prints the server's CPU per request and the client's round trip. The broker's
own CPU per produce request compares against it (RESULTS.md, issue 15):
whatever the broker spends above the `fsync` row is its own Python.

Usage: python -m benchmarks.produce_floor [--modes echo,thread,fsync]
       [--rate 1000] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

from benchmarks.cpu import process_cpu_s
from benchmarks.floor_pair import measure_pair

MESSAGE = b"x" * 150  # about a small produce request
METHOD = "/keybus.floor.Produce/Stream"
MODES = ("echo", "thread", "fsync")


def _same(data: bytes) -> bytes:
    return data


def _serve(mode: str, ports: Any) -> None:
    import grpc
    import uvloop

    async def main() -> None:
        with tempfile.TemporaryFile(prefix="keybus-produce-floor-") as log:
            fd = log.fileno()

            def append(data: bytes) -> None:
                os.write(fd, data)
                os.fsync(fd)

            async def stream(requests: AsyncIterator[bytes],
                             context: Any) -> AsyncIterator[bytes]:
                async for request in requests:
                    if mode == "thread":
                        await asyncio.to_thread(len, request)
                    elif mode == "fsync":
                        await asyncio.to_thread(append, request)
                    yield request

            server = grpc.aio.server()
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
                "keybus.floor.Produce",
                {"Stream": grpc.stream_stream_rpc_method_handler(stream, _same, _same)}),))
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            ports.put(port)
            await server.wait_for_termination()

    uvloop.run(main())


async def _requests(port: int, server_pid: int, rate: int, seconds: float) -> dict[str, float]:
    import grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream(METHOD, request_serializer=_same,
                                     response_deserializer=_same)()
        for _ in range(100):  # warm up
            await call.write(MESSAGE)
            await call.read()
        trips: list[float] = []
        cpu_before, began = process_cpu_s(server_pid), time.monotonic()
        while (now := time.monotonic()) < began + seconds:
            await asyncio.sleep(max(0.0, began + len(trips) / rate - now))
            sent = time.perf_counter()
            await call.write(MESSAGE)
            await call.read()
            trips.append(time.perf_counter() - sent)
        elapsed, cpu = time.monotonic() - began, process_cpu_s(server_pid) - cpu_before
        await call.done_writing()
    trips.sort()
    return {"requests": len(trips), "server_cores": cpu / elapsed,
            "server_cpu_us_per_request": cpu / len(trips) * 1e6,
            "rtt_p50_ms": trips[len(trips) // 2] * 1e3,
            "rtt_p99_ms": trips[int(len(trips) * 0.99)] * 1e3}


def _client(port: int, server_pid: int, rate: int, seconds: float, results: Any) -> None:
    import uvloop

    results.put(uvloop.run(_requests(port, server_pid, rate, seconds)))


def measure(mode: str, rate: int, seconds: float) -> dict[str, float]:
    """Server CPU and round trips over `seconds` of `rate` requests/s, each side in a
    process of its own (floor_pair.py)."""
    row: dict[str, float] = measure_pair(_serve, (mode,), _client, (rate, seconds),
                                         seconds + 60)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.produce_floor",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: "
                        + ", ".join(MODES))
    parser.add_argument("--rate", type=int, default=1_000, help="requests/s, one at a time")
    parser.add_argument("--seconds", type=float, default=5.0)
    options = parser.parse_args(argv)
    modes = [m for m in options.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes {options.modes!r}: each must be one of {', '.join(MODES)}")
    if not 1 <= options.rate <= 5_000 or options.seconds <= 0:
        parser.error("--rate must be 1..5000 requests/s and --seconds positive")
    for mode in modes:
        row = measure(mode, options.rate, options.seconds)
        print(f"{mode}: {row['requests']:.0f} requests, server {row['server_cores']:.3f} cores "
              f"= {row['server_cpu_us_per_request']:.0f} CPU-us per request; round trip p50 "
              f"{row['rtt_p50_ms']:.3f} / p99 {row['rtt_p99_ms']:.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
