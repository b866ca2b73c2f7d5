"""The latency floor of the issue's topology with grpcio alone: a fan-out relay.

`python -m benchmarks latency --systems grpc-floor,grpc-floor-fsync` runs it
as two more systems, with the same producer and consumer loops, pacing,
clocks and histograms as Keybus and its peers (client_loops.py). What it
measures is the least any broker built on grpcio's asyncio stack pays on
this machine for the issue's shape (one producer process, one server process,
4 consumer processes, 127.0.0.1): Keybus's figures above it are what
Keybus's own work costs; the floor's own figures against the issue's limits
say whether a grpcio broker can meet them here at all.

The relay (`python -m benchmarks.fanout_floor --port P [--fsync-dir D]`) is a
grpcio asyncio server on uvloop, as the broker runs, with two methods on raw
bytes and nothing else (no log, no offsets, no acks, no permits, no
validation):

- Produce (stream-stream): a request is one producer batch (`encode_batch`:
  int64 keys and the batch's one value). The relay gives each subscriber the
  events whose `key % subscribers` is its index (`route`), through its
  queue, and answers the request with an empty message. With `--fsync-dir`
  it first appends the request to a file there and fsyncs it on a worker
  thread, as a group commit: the requests read while an fsync runs are
  written and fsynced together next, as the broker's are.
- Subscribe (unary-stream): the consumer's stream of routed batches.

The producer writes each batch to its stream as soon as it is due (it does
not wait for the answer, as the Keybus producer does with Nagle's rule) and
counts the answers; a consumer reads the stream on a task of its own and
hands batches to the shared loop through a queue, as the SDK consumer does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import struct
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import client_loops
from benchmarks.link import Link, Task, monotonic_ns
from benchmarks.peers.servers import free_port, running_server
from benchmarks.systems import Client, Server, System
from sdk.core.grpc_engine import prefer_polling_engine

SERVICE = "keybus.floor.Fanout"
PRODUCE = f"/{SERVICE}/Produce"
SUBSCRIBE = f"/{SERVICE}/Subscribe"
FETCH_WAIT_S = 0.1  # an empty fetch returns after this, so a consumer sees "done" in time
FLUSH_WAIT_S = 60.0  # the producer's last answers, at most
_COUNT = struct.Struct("<I")
NAME = "grpcio fan-out floor"
NAME_FSYNC = "grpcio fan-out floor, fsync"
DURABILITY = ("nothing stored: the relay forwards each request to its consumers and answers it "
              "(the floor of any grpcio broker, not a broker)")
DURABILITY_FSYNC = ("each request appended to a file and fsynced on a worker thread before it "
                    "is forwarded and answered; group commit: the requests read during an fsync "
                    "share the next (the floor, not a broker)")


def encode_batch(keys: Sequence[int], value: bytes) -> bytes:
    """A producer batch: the key count, the int64 keys, then the batch's one value."""
    return _COUNT.pack(len(keys)) + struct.pack(f"<{len(keys)}q", *keys) + value


def route(request: bytes, subscribers: int) -> dict[int, bytes]:
    """Per subscriber index, the message it gets: how many of the batch's events have
    `key % subscribers` equal to its index, then the value (subscribers without one: none)."""
    (n,) = _COUNT.unpack_from(request)
    keys = struct.unpack_from(f"<{n}q", request, _COUNT.size)
    value = request[_COUNT.size + 8 * n:]
    counts = [0] * subscribers
    for key in keys:
        counts[key % subscribers] += 1
    return {i: _COUNT.pack(c) + value for i, c in enumerate(counts) if c}


def decode_delivery(message: bytes) -> list[bytes]:
    """The events of a routed message: its value once per event."""
    (n,) = _COUNT.unpack_from(message)
    return [message[_COUNT.size:]] * n


# ------------------------------------------------------------------ the relay process

def _same(data: bytes) -> bytes:
    return data


async def _relay(port: int, fsync_dir: Path | None) -> None:
    import grpc

    subscribers: list[asyncio.Queue[bytes]] = []
    log = open(fsync_dir / "relay.log", "ab") if fsync_dir else None  # noqa: SIM115

    def append(group: list[bytes]) -> None:
        assert log is not None
        log.write(b"".join(group))
        log.flush()
        os.fsync(log.fileno())

    def forward(request: bytes) -> None:
        if subscribers:
            for index, message in route(request, len(subscribers)).items():
                subscribers[index].put_nowait(message)

    async def produce(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        if log is None:
            async for request in requests:
                forward(request)
                yield b""
            return
        # group commit: requests read while an fsync runs share the next one
        pending: list[bytes] = []
        more = asyncio.Event()
        read_all = False
        committed: asyncio.Queue[int | None] = asyncio.Queue()

        async def read() -> None:
            nonlocal read_all
            async for request in requests:
                pending.append(request)
                more.set()
            read_all = True
            more.set()

        async def commit() -> None:
            while pending or not read_all:
                await more.wait()
                more.clear()
                group = pending.copy()
                pending.clear()
                if group:
                    await asyncio.to_thread(append, group)
                    for request in group:
                        forward(request)
                    committed.put_nowait(len(group))
            committed.put_nowait(None)

        tasks = [asyncio.ensure_future(read()), asyncio.ensure_future(commit())]
        try:
            while (count := await committed.get()) is not None:
                for _ in range(count):
                    yield b""
        finally:
            for task in tasks:
                task.cancel()

    async def subscribe(request: bytes, context: Any) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        subscribers.append(queue)
        await context.send_initial_metadata(())  # subscribed: the consumer's wait ends
        try:
            while True:
                yield await queue.get()
        finally:
            subscribers.remove(queue)

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
        "Produce": grpc.stream_stream_rpc_method_handler(produce, _same, _same),
        "Subscribe": grpc.unary_stream_rpc_method_handler(subscribe, _same, _same)}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fanout_floor",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="listen on 127.0.0.1:PORT")
    parser.add_argument("--fsync-dir", type=Path, default=None,
                        help="append and fsync every request to a file in this directory")
    options = parser.parse_args(argv)
    prefer_polling_engine()  # the engine every Keybus process runs
    import uvloop

    uvloop.run(_relay(options.port, options.fsync_dir))
    return 0


# ------------------------------------------------------------------ the system

def _version() -> str:
    return f"grpcio {metadata.version('grpcio')} asyncio on uvloop (benchmarks/fanout_floor.py)"


def _server(fsync: bool) -> Any:
    @contextlib.contextmanager
    def server(tmp: Path) -> Iterator[Server]:
        port = free_port()
        command = [sys.executable, "-m", "benchmarks.fanout_floor", "--port", str(port)]
        if fsync:
            command += ["--fsync-dir", str(tmp)]
        with running_server(command, port, tmp / "fanout-floor.log") as pid:
            yield Server(f"127.0.0.1:{port}", pid, _version() + (", fsync" if fsync else ""))
    return server


def _nothing(*_: Any) -> None:
    """The relay has no streams to create or drop and no subscription to prepare."""


async def _stopped(reading: asyncio.Future[None]) -> None:
    """Cancel a task reading a call and wait for it (the call's end may raise in it)."""
    import grpc

    reading.cancel()
    with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
        await reading


async def _produce(task: Task, link: Link) -> dict[str, Any]:
    import grpc

    async with grpc.aio.insecure_channel(task.address) as channel:
        call: Any = channel.stream_stream(PRODUCE, request_serializer=_same,
                                          response_deserializer=_same)()
        written = answered = 0
        all_answered = asyncio.Event()

        async def answers() -> None:
            nonlocal answered
            async for _ in call:
                answered += 1
                if answered == written:
                    all_answered.set()

        reading = asyncio.ensure_future(answers())

        async def send(keys: Sequence[int], value: bytes) -> None:
            nonlocal written
            written += 1
            all_answered.clear()
            await call.write(encode_batch(keys, value))

        async def flush() -> None:
            if answered < written:
                await asyncio.wait_for(all_answered.wait(), FLUSH_WAIT_S)
            await call.done_writing()

        try:
            return await client_loops.produce_async(task, link, send, flush)
        finally:
            await _stopped(reading)


def produce(task: Task, link: Link) -> dict[str, Any]:
    """Producer process: a batch is written to the stream when due; answers are counted."""
    prefer_polling_engine()
    return asyncio.run(_produce(task, link))


async def _consume(task: Task, link: Link) -> dict[str, Any]:
    import grpc

    async with grpc.aio.insecure_channel(task.address) as channel:
        call: Any = channel.unary_stream(SUBSCRIBE, request_serializer=_same,
                                         response_deserializer=_same)(b"")
        arrived: asyncio.Queue[bytes] = asyncio.Queue()

        async def read() -> None:
            async for message in call:
                arrived.put_nowait(message)

        reading = asyncio.ensure_future(read())
        await call.wait_for_connection()

        async def fetch() -> tuple[list[bytes], int]:
            try:
                message = await asyncio.wait_for(arrived.get(), FETCH_WAIT_S)
            except TimeoutError:
                return [], 0
            return decode_delivery(message), monotonic_ns()

        try:
            return await client_loops.consume_async(task, link, fetch)
        finally:
            call.cancel()
            await _stopped(reading)


def consume(task: Task, link: Link) -> dict[str, Any]:
    """Consumer process (uvloop, as the Keybus consumers run): read the routed batches."""
    prefer_polling_engine()
    import uvloop

    return uvloop.run(_consume(task, link))


def system(fsync: bool) -> System:
    name = NAME_FSYNC if fsync else NAME
    return System(name=name, durability=DURABILITY_FSYNC if fsync else DURABILITY,
                  server=_server(fsync), create_stream=_nothing, drop_stream=_nothing,
                  produce=produce, clients=(Client(name, _nothing, consume),))


if __name__ == "__main__":
    raise SystemExit(main())
