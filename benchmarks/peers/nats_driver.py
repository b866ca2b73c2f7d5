"""NATS JetStream: nats-server -js, nats-py async publish with acks, pull consumers.

Server: Debian's `nats-server -js` on 127.0.0.1, a free port, a temp store
dir. A stream on file storage holds subjects "STREAM.>"; an event with key k
goes to "STREAM.k". Producer: `publish_async` (each publish gets its own ack)
with at most `PUBLISH_WINDOW_EVENTS` unacknowledged. Consumers: one durable
pull consumer with explicit acks shared by every consumer process; each
fetches up to `batch` messages and acks each one (NATS acks per message).

In the latency scenario a fetch asks for what one producer tick sends (10 at
10,000 events/s), not a full batch: nats-py's fetch returns when its batch is
full or its timeout passes, so a large batch would hold early messages back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks import client_loops
from benchmarks.link import Link, Task, monotonic_ns
from benchmarks.measurement import CompareWorkload
from benchmarks.pacing import send_batch_events
from benchmarks.peers.servers import ensure_installed, free_port, running_server, version_of
from benchmarks.systems import Client, Server, System

NAME = "NATS JetStream"
BINARY = PACKAGE = "nats-server"
DURABLE = "bench"
PUBLISH_WINDOW_EVENTS = 16_000  # unacked publishes, as Keybus's 16 in-flight batches of 1,000
FETCH_WAIT_S = 0.1  # an empty fetch returns after this, so a consumer sees "done" in time
ACK_WAIT_S = 60.0  # no redelivery during a run
DURABILITY = ("file storage: a publish is acknowledged once written to the stream's block file "
              "(OS page cache), without fsync; the file store fsyncs every 2 minutes "
              "(nats-server 2.9's fixed default, no sync_interval option before 2.10), so an OS "
              "crash or power loss can lose up to 2 minutes of acknowledged events")


async def _connect(address: str) -> Any:
    import nats  # imported here: only NATS runs need nats-py

    return await nats.connect(f"nats://{address}", connect_timeout=5, allow_reconnect=False)


async def _jetstream_ready(address: str) -> bool:
    nc = await _connect(address)
    try:
        await nc.jetstream().account_info()
        return True
    finally:
        await nc.close()


def _ready(address: str) -> bool:
    try:
        return asyncio.run(_jetstream_ready(address))
    except Exception:  # not up yet: running_server retries until its deadline
        return False


@contextlib.contextmanager
def server(tmp: Path) -> Iterator[Server]:
    """nats-server with JetStream on a temp store dir; stopped by PID on exit."""
    binary = ensure_installed(BINARY, PACKAGE)
    port = free_port()
    address = f"127.0.0.1:{port}"
    command = [binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(tmp / "jetstream")]
    with running_server(command, port, tmp / "nats.log", lambda: _ready(address)) as pid:
        yield Server(address, pid, version_of(binary))


async def _create_stream(address: str, stream: str) -> None:
    from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType
    from nats.js.errors import NotFoundError

    nc = await _connect(address)
    try:
        js = nc.jetstream()
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(stream)
        await js.add_stream(name=stream, subjects=[f"{stream}.>"], storage=StorageType.FILE,
                            retention=RetentionPolicy.LIMITS, discard=DiscardPolicy.OLD)
    finally:
        await nc.close()


def create_stream(address: str, stream: str, workload: CompareWorkload) -> None:
    asyncio.run(_create_stream(address, stream))


async def _drop_stream(address: str, stream: str) -> None:
    nc = await _connect(address)
    try:
        await nc.jetstream().delete_stream(stream)
    finally:
        await nc.close()


def drop_stream(address: str, stream: str) -> None:
    asyncio.run(_drop_stream(address, stream))


async def _add_durable(address: str, stream: str, workload: CompareWorkload) -> None:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    nc = await _connect(address)
    try:
        pending_max = max(1_000, 2 * workload.consumers * workload.batch_events)
        await nc.jetstream().add_consumer(stream, ConsumerConfig(
            durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
            max_ack_pending=pending_max, ack_wait=ACK_WAIT_S))
    finally:
        await nc.close()


def prepare_pull(address: str, stream: str, workload: CompareWorkload) -> None:
    """One durable pull consumer that every consumer process shares."""
    asyncio.run(_add_durable(address, stream, workload))


async def _produce(task: Task, link: Link) -> dict[str, Any]:
    nc = await _connect(task.address)
    js = nc.jetstream(publish_async_max_pending=PUBLISH_WINDOW_EVENTS)
    subjects = [f"{task.stream}.{key}" for key in range(task.workload.keys)]
    failed: list[BaseException] = []

    def check(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None and not failed:
            failed.append(future.exception())  # type: ignore[arg-type]

    async def send(keys: Sequence[int], value: bytes) -> None:
        publish = js.publish_async
        for key in keys:
            (await publish(subjects[key], value)).add_done_callback(check)

    async def flush() -> None:
        await asyncio.wait_for(js.publish_async_completed(), task.workload.deadline_s)
        if failed:
            raise RuntimeError(f"a JetStream publish was not acknowledged: {failed[0]!r}")

    try:
        return await client_loops.produce_async(task, link, send, flush)
    finally:
        await nc.close()


def produce(task: Task, link: Link) -> dict[str, Any]:
    """Producer process: publish_async per event, a bounded window of unacked publishes."""
    return asyncio.run(_produce(task, link))


async def _consume(task: Task, link: Link) -> dict[str, Any]:
    nc = await _connect(task.address)
    subscription = await nc.jetstream().pull_subscribe_bind(DURABLE, stream=task.stream)
    batch = send_batch_events(task.workload, task.paced)

    async def fetch() -> tuple[list[bytes], int]:
        try:
            messages = await subscription.fetch(batch, timeout=FETCH_WAIT_S)
        except TimeoutError:  # nats-py raises its own subclass or asyncio's: nothing to fetch
            return [], 0
        received_ns = monotonic_ns()
        for message in messages:
            await message.ack()
        return [message.data for message in messages], received_ns

    try:
        report = await client_loops.consume_async(task, link, fetch)
        await nc.flush()
        return report
    finally:
        await nc.close()


def consume(task: Task, link: Link) -> dict[str, Any]:
    """Consumer process: fetch up to a batch from the shared durable, ack each message."""
    return asyncio.run(_consume(task, link))


def system() -> System:
    return System(name=NAME, durability=DURABILITY, server=server, create_stream=create_stream,
                  drop_stream=drop_stream, produce=produce,
                  clients=(Client("NATS pull consumer", prepare_pull, consume),))
