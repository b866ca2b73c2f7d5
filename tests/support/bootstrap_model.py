"""A keyed workload with upserts and deletes, its model, and state built from reads.

The model is a dict {(source, key): value} built from the full history in
offset order (latest value per key, deleted keys absent): what a compacted
view, a bootstrap, or a consumer that read everything must end up holding.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sdk import DELETE, UPSERT, Admin, Producer
from sdk.core.columns import Event
from sdk.core.pb import keybus_pb2 as pb
from sdk.reader import ReadBatch

SOURCES = ("accounts", "orders")


@dataclass
class History:
    """Every event produced, in offset order per partition, and the model."""

    model: dict[tuple[str, int], bytes] = field(default_factory=dict)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)  # latest event's offset
    by_offset: dict[int, tuple[str, int]] = field(default_factory=dict)
    events: int = 0

    def apply(self, source: str, key: int, value: bytes, opcode: int, offset: int) -> None:
        self.events += 1
        self.offsets[(source, key)] = offset
        self.by_offset[offset] = (source, key)
        if opcode == DELETE:
            self.model.pop((source, key), None)
        else:
            self.model[(source, key)] = value


def plan_events(rng: random.Random, keys: int, rounds: int, delete_share: float,
                tag: str) -> list[tuple[str, int, bytes, int]]:
    """(source, key, value, opcode) for `rounds` passes over keys x sources."""
    events = []
    for round_ in range(rounds):
        for key in rng.sample(range(keys), keys):
            for source in SOURCES:
                opcode = DELETE if rng.random() < delete_share else UPSERT
                value = b"" if opcode == DELETE else f"{tag}{round_}-{source}-{key}".encode()
                events.append((source, key, value, opcode))
    return events


async def produce_events(producer: Producer, events: list[tuple[str, int, bytes, int]],
                         history: History, chunk: int = 2_000, partition: int | None = 0) -> None:
    """Send events in column batches (on partition 0, or None: by slot); record
    offsets in `history` (by_offset only makes sense for one partition)."""
    for i in range(0, len(events), chunk):
        part = events[i:i + chunk]
        future = await producer.send_batch(
            [e[1] for e in part], [e[2] for e in part], partition=partition,
            sources=[e[0] for e in part], opcodes=[e[3] for e in part])
        for (source, key, value, opcode), produced in zip(part, await future, strict=True):
            history.apply(source, key, value, opcode, produced.offset)


def apply_events(state: dict[tuple[str, int | str], bytes], events: Iterable[Event]) -> None:
    for event in events:
        if event.opcode == DELETE:
            state.pop((event.source, event.key), None)  # type: ignore[arg-type]
        else:
            state[(event.source, event.key)] = event.value  # type: ignore[index]


@dataclass
class BootstrapLog:
    """What a bootstrap read delivered, phase by phase."""

    markers: list[object] = field(default_factory=list)
    snapshot: list[Event] = field(default_factory=list)
    log: list[Event] = field(default_factory=list)  # catch-up then online, in order
    phases: list[str] = field(default_factory=list)  # phase of each log event

    def add(self, batch: ReadBatch) -> None:
        if batch.marker is not None:
            self.markers.append(batch.marker)
            return
        events = batch.events()
        if batch.phase == "snapshot":
            self.snapshot.extend(events)
        else:
            self.log.extend(events)
            self.phases.extend([batch.phase or ""] * len(events))

    def state(self) -> dict[tuple[str, int | str], bytes]:
        state: dict[tuple[str, int | str], bytes] = {}
        apply_events(state, self.snapshot)
        apply_events(state, self.log)
        return state


async def describe_partition(broker: str, topic: str, partition: int = 0) -> pb.PartitionInfo:
    async with Admin(broker) as admin:
        return (await admin.describe_topic(topic)).partitions[partition]


async def wait_for_partition(broker: str, topic: str, ready: Callable[[pb.PartitionInfo], bool],
                             what: str, timeout_s: float = 60) -> pb.PartitionInfo:
    """Poll DescribeTopic until `ready(partition 0)` (bounded: fails after timeout_s)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        p = await describe_partition(broker, topic)
        if ready(p):
            return p
        assert loop.time() < deadline, f"timed out waiting for {what}: {p}"
        await asyncio.sleep(0.05)
