"""Redis Streams: redis-server with an append-only file, pipelined XADD, consumer groups.

Server: Debian's `redis-server` on 127.0.0.1, a free port and a temp dir,
`--appendonly yes --appendfsync everysec --save ""` (AOF only, no RDB
snapshots). Producer: one redis-py client, one pipeline of XADDs per batch
(fields k = key, v = value), each pipeline waits for its replies. Consumers:
one consumer group, XREADGROUP COUNT batch BLOCK 100 ms, then one XACK of the
batch's ids, each consumer in its own process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks import client_loops
from benchmarks.link import Link, Task, monotonic_ns
from benchmarks.measurement import CompareWorkload
from benchmarks.peers.servers import ensure_installed, free_port, running_server, version_of
from benchmarks.systems import Client, Server, System

NAME = "Redis Streams"
BINARY = PACKAGE = "redis-server"
GROUP = "bench"
BLOCK_MS = 100  # an empty XREADGROUP returns after this, so a consumer sees "done" in time
DURABILITY = ("appendonly yes, appendfsync everysec, no RDB snapshots: XADD's reply does not "
              "wait for fsync; a background thread fsyncs the append-only file about once a "
              "second, so an OS crash or power loss can lose about the last 1-2 s of "
              "acknowledged events")


def _connect(address: str) -> Any:
    import redis  # imported here: only Redis runs need redis-py

    host, port = address.rsplit(":", 1)
    return redis.Redis(host=host, port=int(port), socket_timeout=30, socket_connect_timeout=5)


def _answers_ping(address: str) -> bool:
    from redis.exceptions import RedisError

    try:
        with contextlib.closing(_connect(address)) as client:
            return bool(client.ping())
    except (RedisError, OSError):  # still loading: the caller retries until its deadline
        return False


@contextlib.contextmanager
def server(tmp: Path) -> Iterator[Server]:
    """redis-server with AOF everysec on a free port; stopped by PID on exit."""
    binary = ensure_installed(BINARY, PACKAGE)
    port = free_port()
    address = f"127.0.0.1:{port}"
    command = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(tmp),
               "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
               "--daemonize", "no", "--protected-mode", "yes", "--logfile", ""]
    with running_server(command, port, tmp / "redis.log", lambda: _answers_ping(address)) as pid:
        yield Server(address, pid, version_of(binary))


def create_stream(address: str, stream: str, workload: CompareWorkload) -> None:
    """No stream under that name (the first XADD creates it)."""
    with contextlib.closing(_connect(address)) as client:
        client.delete(stream)


def prepare_group(address: str, stream: str, workload: CompareWorkload) -> None:
    """The consumer group, reading from the stream's first entry."""
    with contextlib.closing(_connect(address)) as client:
        client.xgroup_create(stream, GROUP, id="0", mkstream=True)


def drop_stream(address: str, stream: str) -> None:
    with contextlib.closing(_connect(address)) as client:
        client.delete(stream)


def produce(task: Task, link: Link) -> dict[str, Any]:
    """Producer process: a pipeline of `batch` XADDs per send, replies awaited."""
    client = _connect(task.address)
    client.ping()  # connect before the start signal
    stream = task.stream

    def send(keys: Sequence[int], value: bytes) -> None:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.xadd(stream, {b"k": key, b"v": value})
        pipe.execute()

    try:
        return client_loops.produce(task, link, send, lambda: None)
    finally:
        client.close()


def _entries(response: Any) -> list[Any]:
    """[(id, fields), ...] from XREADGROUP's reply, RESP2 (list) or RESP3 (dict)."""
    if not response:
        return []
    if isinstance(response, dict):
        return list(next(iter(response.values())) or [])
    return list(response[0][1] or [])


def consume(task: Task, link: Link) -> dict[str, Any]:
    """Consumer process: XREADGROUP a batch, then XACK its ids in one call."""
    client = _connect(task.address)
    client.ping()  # connect before the start signal
    stream, name, count = task.stream, f"consumer-{task.index}", task.workload.batch_events

    def fetch() -> tuple[list[bytes], int]:
        entries = _entries(client.xreadgroup(GROUP, name, {stream: ">"}, count=count,
                                             block=BLOCK_MS))
        received_ns = monotonic_ns()
        if entries:
            client.xack(stream, GROUP, *[entry_id for entry_id, _ in entries])
        return [fields[b"v"] for _, fields in entries], received_ns

    try:
        return client_loops.consume(task, link, fetch)
    finally:
        client.close()


def system() -> System:
    return System(name=NAME, durability=DURABILITY, server=server, create_stream=create_stream,
                  drop_stream=drop_stream, produce=produce,
                  clients=(Client("Redis consumer group", prepare_group, consume),))
