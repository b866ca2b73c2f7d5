"""Keybus in the comparison: the broker with fsync before ack, the SDK producer.

The producer process does what `scenarios.produce` does (one SDK Producer,
`await send()` per event, batches of `batch_events`; in the paced latency
scenario too with the SDK's default linger: a tick leaves at once when no request is out,
as the peers' clients send each tick), through the shared loop
so that it paces and counts like the peers. End-to-end consumers come from the
subscription work through `keybus_e2e`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import client_loops, keybus_e2e
from benchmarks.broker import running_broker
from benchmarks.link import Link, Task
from benchmarks.measurement import CompareWorkload
from benchmarks.systems import Server, System

NAME = "Keybus"
# The SDK default in every scenario: with Nagle's rule a tick goes at once when no request is
# out, and what is sent while one is out gathers into the next request.
LATENCY_LINGER_MS = 5
DURABILITY = ("fsync before ack: a produce request is acknowledged after its RocksDB WriteBatch "
              "is fsynced (group commit: one fsync covers the requests that arrived together)")


def _version() -> str:
    try:
        return f"Keybus {metadata.version('keybus')}"
    except metadata.PackageNotFoundError:
        return "Keybus (source tree)"


@contextlib.contextmanager
def server(tmp: Path) -> Iterator[Server]:
    """A broker with fsync on (running_broker keeps its own temp dir)."""
    with running_broker() as (address, pid):
        yield Server(address, pid, _version())


async def _create_topic(address: str, topic: str) -> None:
    from sdk import Admin

    async with Admin(address) as admin:
        await admin.create_topic(topic, partitions=1)


def create_stream(address: str, topic: str, workload: CompareWorkload) -> None:
    asyncio.run(_create_topic(address, topic))


async def _delete_topic(address: str, topic: str) -> None:
    from sdk import Admin

    async with Admin(address) as admin:
        await admin.delete_topic(topic)


def drop_stream(address: str, topic: str) -> None:
    asyncio.run(_delete_topic(address, topic))


async def _produce(task: Task, link: Link) -> dict[str, Any]:
    from sdk import Producer
    from sdk.producer import ProducerConfig

    linger_ms = LATENCY_LINGER_MS if task.paced else ProducerConfig().linger_ms
    async with await Producer.create(task.address, task.stream,
                                     batch_events_max=task.workload.batch_events,
                                     linger_ms=linger_ms) as producer:
        send_one = producer.send

        async def send(keys: Sequence[int], value: bytes) -> None:
            for key in keys:
                await send_one(key, value)

        return await client_loops.produce_async(task, link, send, producer.flush)


def produce(task: Task, link: Link) -> dict[str, Any]:
    """Producer process: `await send()` per event; flush waits for every ack."""
    return asyncio.run(_produce(task, link))


def _churn(server: Server, workload: CompareWorkload, show_progress: bool) -> dict[str, Any]:
    from benchmarks import keybus_churn

    return keybus_churn.run(server, workload, show_progress)


def system() -> System:
    loaded = keybus_e2e.load()
    return System(name=NAME, durability=DURABILITY, server=server, create_stream=create_stream,
                  drop_stream=drop_stream, produce=produce, clients=loaded.clients,
                  pending=loaded.pending, churn=_churn)
