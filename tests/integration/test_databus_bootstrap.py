"""A Databus consumer whose checkpoint fell off retention bootstraps and catches up.

Goal: with bootstrap allowed, a registration whose checkpoint is older than
what the log still holds switches every such partition to bootstrap (the
compacted view's snapshot, then the catch-up, through the bootstrap
callbacks), then goes on with ordinary windows, and ends in the same state
as a consumer that consumed everything from the start. Its checkpoints
record the phase: the snapshot by key, the catch-up by offset, then online.
Without bootstrap the same registration stops with OffsetOutOfRange instead
of silently skipping what retention removed. A registration stopped in the
middle of its bootstrap continues it from its checkpoint.
Method: one broker process (retention checked every 50 ms, 2 partitions);
"full" consumes from the start throughout; "late" consumes the first part,
stops, and is restarted after more upserts and deletes made retention trim
past its checkpoint. State is a dict per consumer, compared with the model
of the full history. A checkpoint store wrapper records every checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from sdk import DELETE, Admin, OffsetOutOfRange, Producer
from sdk.databus import CHECKPOINT, SUCCESS, DatabusClient, DatabusCombinedConsumerBase, DbusEvent
from sdk.databus.config import DatabusConfig
from sdk.databus.results import CallbackResult
from sdk.stores.broker_stores import BrokerCheckpointStore
from sdk.stores.file_checkpoints import FileCheckpointStore
from sdk.stores.records import Checkpoint
from tests.support.bootstrap_model import History, plan_events, produce_events, wait_for_partition
from tests.support.broker_process import BrokerProcess

TOPIC = "accounts-db"
PARTITIONS = 2
CONFIG = DatabusConfig(checkpoint_windows_n=1_000)


class StateConsumer(DatabusCombinedConsumerBase):
    """Applies every event to a dict; counts the callbacks it gets."""

    def __init__(self) -> None:
        self.state: dict[tuple[str, int | str], bytes] = {}
        self.calls: Counter[str] = Counter()

    def _apply(self, event: DbusEvent) -> None:
        if event.opcode == DELETE:
            self.state.pop((event.source, event.key), None)
        else:
            self.state[(event.source, event.key)] = event.value

    def on_event(self, event: DbusEvent) -> CallbackResult:
        self._apply(event)
        return SUCCESS

    def on_bootstrap_event(self, event: DbusEvent) -> CallbackResult:
        self.calls["bootstrap_event"] += 1
        self._apply(event)
        return SUCCESS

    def on_start_bootstrap(self) -> CallbackResult:
        self.calls["start_bootstrap"] += 1
        return SUCCESS

    def on_end_bootstrap(self) -> CallbackResult:
        self.calls["end_bootstrap"] += 1
        return SUCCESS

    def on_end_bootstrap_sequence(self, scn: int) -> CallbackResult:
        """Checkpoint the first sequences (the snapshot's) and every 50th."""
        self.calls["sequence"] += 1
        n = self.calls["sequence"]
        return CHECKPOINT if n <= 4 or n % 50 == 0 else SUCCESS


class RecordingStore:
    """A checkpoint store (files, or the broker's) that remembers every checkpoint written."""

    def __init__(self, inner: FileCheckpointStore | BrokerCheckpointStore) -> None:
        self.inner = inner
        self.written: list[Checkpoint] = []

    async def list_checkpoints(self, namespace: str, topic: str,
                               consumer_group: str) -> list[Checkpoint]:
        return await self.inner.list_checkpoints(namespace, topic, consumer_group)

    async def get_checkpoint(self, namespace: str, topic: str, consumer_group: str,
                             partition: int) -> Checkpoint | None:
        return await self.inner.get_checkpoint(namespace, topic, consumer_group, partition)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        await self.inner.update_checkpoint(checkpoint)
        self.written.append(checkpoint)


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 90) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def _produce(broker: str, history: History, seed: int, keys: int, rounds: int) -> None:
    events = plan_events(random.Random(seed), keys, rounds, 0.15, f"s{seed}-")
    async with await Producer.create(broker, TOPIC) as producer:
        await produce_events(producer, events, history, chunk=500, partition=None)


async def _starts(broker: str) -> list[int]:
    async with Admin(broker) as admin:
        return [p.start_offset for p in (await admin.describe_topic(TOPIC)).partitions]


async def _scenario(broker: str, root: Path) -> tuple[StateConsumer, StateConsumer,
                                                      RecordingStore, History]:
    history = History()
    async with Admin(broker) as admin:
        await admin.create_topic(TOPIC, partitions=PARTITIONS, retention_bytes=250_000)
    full = StateConsumer()
    full_client = DatabusClient(broker, checkpoint_store=FileCheckpointStore(root / "full"),
                                config=CONFIG)
    full_client.register(full, topic=TOPIC, name="full")
    store = RecordingStore(FileCheckpointStore(root / "late"))
    late = StateConsumer()
    async with full_client:
        first = DatabusClient(broker, checkpoint_store=store, config=CONFIG)
        first.register(late, topic=TOPIC, name="late", bootstrap=True)
        async with first:
            await _produce(broker, history, 1, 3_000, 1)
            await _until(lambda: late.state == history.model, "late to read the first part")
        stopped_at = {c.partition: c.offset for c in store.written}
        assert len(stopped_at) == PARTITIONS
        await _produce(broker, history, 2, 5_000, 4)  # more than retention keeps
        await _until(lambda: full.state == history.model, "full to keep up")

        async def trimmed() -> bool:
            return all(s > stopped_at[p] + 1 for p, s in enumerate(await _starts(broker)))
        for _ in range(1_200):  # bounded: about 60 s
            if await trimmed():
                break
            await asyncio.sleep(0.05)
        assert await trimmed(), "retention never removed the late consumer's position"

        refused = DatabusClient(broker, checkpoint_store=store, config=CONFIG)
        refused.register(StateConsumer(), topic=TOPIC, name="late")  # no bootstrap allowed
        with pytest.raises(OffsetOutOfRange, match="bootstrap=True"):
            await refused.run()

        second = DatabusClient(broker, checkpoint_store=store, config=CONFIG)
        second.register(late, topic=TOPIC, name="late", bootstrap=True)
        async with second:
            await _until(lambda: late.calls["end_bootstrap"] == PARTITIONS, "the bootstraps")
            await _produce(broker, history, 3, 2_000, 1)  # online again
            await _until(lambda: late.state == history.model == full.state, "both to catch up")
    return full, late, store, history


def test_consumer_behind_retention_bootstraps_to_the_same_state(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", "--retention-check-interval-ms", "50")
    broker.start()
    try:
        full, late, store, history = asyncio.run(_scenario(broker.address, tmp_path))
    finally:
        broker.stop()
    assert late.state == full.state == history.model
    assert late.calls["start_bootstrap"] == late.calls["end_bootstrap"] == PARTITIONS
    assert late.calls["bootstrap_event"] > 0
    phases = [json.loads(c.bootstrap)["phase"] if c.bootstrap else "online"
              for c in store.written]
    assert "snapshot" in phases, Counter(phases)
    # Whether a catch-up checkpoint is written depends on how far the view lagged
    # when the snapshot was taken; the order of the phases does not.
    rank = {"snapshot": 0, "catchup": 1, "online": 2}
    for partition in range(PARTITIONS):
        mine = [phase for c, phase in zip(store.written, phases, strict=True)
                if c.partition == partition]
        since = mine[mine.index("snapshot"):] if "snapshot" in mine else []
        assert [rank[p] for p in since] == sorted(rank[p] for p in since), mine
    snapshot_marks = [json.loads(c.bootstrap) for c in store.written
                      if c.bootstrap and json.loads(c.bootstrap)["phase"] == "snapshot"]
    assert all(m["source"] is not None and m["key"] is not None for m in snapshot_marks)
    assert phases[-1] == "online"


class StoppingConsumer(StateConsumer):
    """Records snapshot rows; after its first bootstrap sequence, asks to be stopped."""

    def __init__(self, state: dict[tuple[str, int | str], bytes]) -> None:
        super().__init__()
        self.state = state
        self.rows: list[tuple[str, int | str]] = []
        self.stop_now = asyncio.Event()

    def on_bootstrap_event(self, event: DbusEvent) -> CallbackResult:
        self.rows.append((event.source, event.key))
        return super().on_bootstrap_event(event)

    def on_end_bootstrap_sequence(self, scn: int) -> CallbackResult:
        self.stop_now.set()
        return CHECKPOINT  # the snapshot's position is saved after every sequence


async def _stop_mid_snapshot(broker: str, root: Path, kind: str
                             ) -> tuple[list[list[tuple[str, int | str]]],
                                        dict[tuple[str, int | str], bytes], History,
                                        RecordingStore]:
    history = History()
    async with Admin(broker) as admin:
        await admin.create_topic("resume-db", view=True)
    events = plan_events(random.Random(5), 12_000, 1, 0.1, "r")
    async with await Producer.create(broker, "resume-db") as producer:
        await produce_events(producer, events, history, chunk=1_000)
    await wait_for_partition(broker, "resume-db", lambda p: p.view_offset == history.events,
                             "the view")  # so that the log is in the snapshot
    store = RecordingStore(FileCheckpointStore(root / "resume") if kind == "file"
                           else BrokerCheckpointStore(broker))
    state: dict[tuple[str, int | str], bytes] = {}
    runs = []
    for _ in range(2):
        consumer = StoppingConsumer(state)
        client = DatabusClient(broker, checkpoint_store=store, config=CONFIG)
        client.register(consumer, topic="resume-db", name="resume", start="bootstrap",
                        bootstrap=True)
        async with client:
            if not runs:
                await asyncio.wait_for(consumer.stop_now.wait(), 60)
            else:
                await _until(lambda c=consumer: c.calls["end_bootstrap"] == 1, "the bootstrap")
                await _until(lambda: state == history.model, "the state")
        runs.append(consumer.rows)
    return runs, state, history, store


@pytest.mark.parametrize("kind", ["file", "broker"])
def test_a_stopped_bootstrap_continues_from_its_checkpoint(tmp_path: Path, kind: str) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        runs, state, history, store = asyncio.run(_stop_mid_snapshot(broker.address, tmp_path,
                                                                     kind))
    finally:
        broker.stop()
    assert state == history.model
    saved = json.loads(store.written[0].bootstrap)
    assert saved["phase"] == "snapshot" and saved["source"] == runs[0][-1][0]
    first, second = runs
    assert set(first).isdisjoint(second), "the restarted bootstrap read rows again"
    assert len(first) + len(second) == len(history.offsets)  # every key once (tombstones too)
