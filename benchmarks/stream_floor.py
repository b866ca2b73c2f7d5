"""The client's CPU floor per gRPC stream message: grpcio's asyncio stack alone.

A server process streams small messages at a fixed rate to a client process that
only reads them (optionally writing a small message back every `--write-every-ms`,
as a consumer's acks do), on uvloop as the benchmark's consumers run. The client's
CPU per message is what any grpcio asyncio client pays per message on this
machine: the event-engine thread reads the socket, the completion-queue poller
thread hands the completion to the event loop through a socket, the loop resumes
the reader. The SDK consumer's CPU per delivery compares against it (RESULTS.md,
"Client CPU and the receive path").

Usage: python -m benchmarks.stream_floor [--rates 250,1000] [--seconds 5]
       [--write-every-ms 5]   (0: reads only)
Prints one line per rate: client CPU cores, messages, CPU-µs per message.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from benchmarks.floor_pair import measure_pair

MESSAGE = b"x" * 150  # about a one-event Key_Shared delivery
METHOD = "/keybus.floor.Floor/Stream"


def _serve(rate: int, seconds: float, ports: Any) -> None:
    import grpc
    import uvloop

    async def stream(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async def drain() -> None:
            async for _ in requests:
                pass

        draining = asyncio.ensure_future(drain())
        began = time.monotonic()
        try:
            for i in range(int(rate * (seconds + 2))):  # bounded: a little past the client
                await asyncio.sleep(max(0.0, began + i / rate - time.monotonic()))
                yield MESSAGE
        finally:
            draining.cancel()

    async def main() -> None:
        handler = grpc.method_handlers_generic_handler(
            "keybus.floor.Floor", {"Stream": grpc.stream_stream_rpc_method_handler(stream)})
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        ports.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination(seconds + 30)

    uvloop.run(main())


async def _read(port: int, seconds: float, write_every_ms: int) -> tuple[float, int]:
    import grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call: Any = channel.stream_stream(METHOD)()
        await call.write(b"open")
        await call.read()  # connected: the clock starts with the first message
        began_cpu, began = time.process_time(), time.monotonic()
        messages, written = 0, began
        while time.monotonic() - began < seconds:
            if await call.read() is grpc.aio.EOF:
                break
            messages += 1
            if write_every_ms and time.monotonic() - written >= write_every_ms / 1000:
                written = time.monotonic()
                await call.write(b"ack" * 10)
        used = time.process_time() - began_cpu
        call.cancel()
        return used, messages


def _client(port: int, server_pid: int, seconds: float, write_every_ms: int,
            results: Any) -> None:
    import uvloop

    results.put(uvloop.run(_read(port, seconds, write_every_ms)))


def measure(rate: int, seconds: float, write_every_ms: int) -> dict[str, float]:
    """Client CPU over `seconds` of reading `rate` messages/s. Server and client each run
    in a process of their own (floor_pair.py)."""
    used, messages = measure_pair(_serve, (rate, seconds), _client,
                                  (seconds, write_every_ms), seconds + 60)
    return {"rate": rate, "cores": used / seconds, "messages": messages,
            "cpu_us_per_message": used / max(messages, 1) * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stream_floor",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="250,1000", help="messages/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--write-every-ms", type=int, default=5)
    options = parser.parse_args(argv)
    for rate in (int(r) for r in options.rates.split(",")):
        if not 1 <= rate <= 100_000:
            parser.error(f"rate {rate} is out of range 1..100000 messages/s")
        row = measure(rate, options.seconds, options.write_every_ms)
        print(f"rate {rate}/s, a write every {options.write_every_ms} ms: client "
              f"{row['cores']:.3f} cores, {row['messages']:.0f} messages, "
              f"{row['cpu_us_per_message']:.0f} CPU-us per message", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
