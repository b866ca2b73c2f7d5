"""The compacted view and a bootstrap survive kill -9 of the broker.

Goal: (1) a broker SIGKILLed while its view maintenance is behind the log
restarts with a view consistent with the log: once caught up, a bootstrap
equals the model of the full history, each key's entry is its latest event
(offset), and the view's key and tombstone counts match the model's (no
pass counted twice, none half-written). (2) A bootstrap interrupted by a
SIGKILL mid-snapshot resumes after the last key it received, without
starting over: every key arrives once and the result equals the model.
Method: a broker process with one-record maintenance passes (so the view
trails a fast producer); poll DescribeTopic until the view lags, kill -9,
restart. For (2), a Reader with small chunks reads a few snapshot batches,
the broker is killed and restarted, and the Reader carries on.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from sdk import DELETE, Admin, KeybusError, Producer, Reader, read_all
from sdk.core.pb import keybus_pb2 as pb
from tests.support.bootstrap_model import (
    BootstrapLog,
    History,
    describe_partition,
    plan_events,
    produce_events,
    wait_for_partition,
)
from tests.support.broker_process import BrokerProcess

TOPIC = "crash"


async def _produce_and_kill_while_lagging(broker: BrokerProcess, history: History) -> int:
    """Produce in small records while polling the view; past 20,000 events,
    SIGKILL the broker the first time the view is seen behind the log
    (bounded: up to 90,000 events)."""
    async with Admin(broker.address) as admin:
        await admin.create_topic(TOPIC)
    events = plan_events(random.Random(7), 15_000, 3, 0.15, "k")
    lag_seen: list[int] = []

    async def watch() -> None:
        while not lag_seen:
            p = await describe_partition(broker.address, TOPIC)
            if p.end_offset >= 20_000 and 0 < p.view_offset < p.end_offset:
                lag_seen.append(p.end_offset - p.view_offset)
                await asyncio.to_thread(broker.kill)
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    try:
        async with await Producer.create(broker.address, TOPIC,
                                         delivery_timeout_ms=5_000) as producer:
            for i in range(0, len(events), 1_000):
                if lag_seen:
                    break
                await produce_events(producer, events[i:i + 1_000], history, chunk=50)
    except KeybusError:
        pass  # the broker was killed mid-send: what was acknowledged is in `history`
    finally:
        watcher.cancel()
    if not lag_seen:
        await asyncio.to_thread(broker.kill)
    return lag_seen[0] if lag_seen else 0


async def _history_from_log(broker: str) -> History:
    history = History()
    for e in await read_all(broker, TOPIC, 0):
        history.apply(e.source, e.key, e.value, e.opcode, e.offset)  # type: ignore[arg-type]
    return history


async def _wait_caught_up(broker: str, end: int) -> pb.PartitionInfo:
    return await wait_for_partition(broker, TOPIC, lambda p: p.view_offset == end,
                                    "the view to catch up")


def test_view_is_consistent_with_the_log_after_kill_during_maintenance(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", "--view-pass-events-max", "1", "--view-linger-ms", "0")
    broker.start()
    try:
        lag = asyncio.run(_produce_and_kill_while_lagging(broker, History()))
        assert lag > 0, "the view never trailed the log: nothing was interrupted"
        broker.start()
        history = asyncio.run(_history_from_log(broker.address))  # what was stored, acked or not
        p = asyncio.run(_wait_caught_up(broker.address, history.events))
        got = asyncio.run(_bootstrap(broker.address))
    finally:
        broker.stop()
    assert got.state() == history.model
    assert {(e.source, e.key): e.offset for e in got.snapshot} == history.offsets
    tombstones = sum(1 for key in history.offsets if key not in history.model)
    assert (p.view_keys, p.view_tombstones) == (len(history.offsets), tombstones)
    assert sum(e.opcode == DELETE for e in got.snapshot) == tombstones


async def _bootstrap(broker: str, events_max: int = 1_000) -> BootstrapLog:
    got = BootstrapLog()
    async with Reader(broker, TOPIC, 0, start="bootstrap", events_max=events_max) as reader:
        async for batch in reader:
            got.add(batch)
    return got


async def _bootstrap_through_a_kill(broker: BrokerProcess) -> tuple[BootstrapLog, int]:
    got = BootstrapLog()
    batches = 0
    async with Reader(broker.address, TOPIC, 0, start="bootstrap", events_max=200,
                      retry_timeout_ms=60_000) as reader:
        async for batch in reader:
            got.add(batch)
            batches += batch.phase == "snapshot" and batch.count > 0
            if batches == 5 and broker.process is not None and reader.reconnects == 0:
                await asyncio.to_thread(broker.restart)  # SIGKILL, then start again
        return got, reader.reconnects


def test_interrupted_bootstrap_resumes_by_key(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    history = History()
    try:
        async def setup() -> None:
            async with Admin(broker.address) as admin:
                await admin.create_topic(TOPIC)
            events = plan_events(random.Random(9), 25_000, 1, 0.1, "r")
            async with await Producer.create(broker.address, TOPIC) as producer:
                await produce_events(producer, events, history)
            await _wait_caught_up(broker.address, history.events)

        asyncio.run(setup())
        got, reconnects = asyncio.run(_bootstrap_through_a_kill(broker))
    finally:
        broker.stop()
    assert reconnects >= 1, "the stream was never interrupted"
    keys = [(e.source, e.key) for e in got.snapshot]
    assert len(keys) == len(set(keys)) == len(history.offsets), "snapshot restarted or lost keys"
    assert [m.phase for m in got.markers] == ["snapshot", "catchup"]  # type: ignore[attr-defined]
    assert got.state() == history.model
