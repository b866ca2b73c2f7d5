"""The Databus callback consumer through crashes: the broker's and its own.

Goal: (1) with window buffering on, a broker killed mid-window and restarted
never shows as a rollback, neither reading the log nor over a Key_Shared
subscription whose deliveries split windows, and the outage is reported
within seconds (on_error); streaming instead (buffering off) does show the
rollback, so the test can tell the two apart. (2) A consuming process
SIGKILLed at random points over many cycles, while windows of varying size
flow, processes every window whole at least once, none partially and none
skipped (checked against the log), with checkpoints in a file store or the
broker-held store. (3) Across processes: two processes on
one Key_Shared subscription present every event exactly once between them,
framed in whole window shares. (4) Checkpoints kept in the broker-held store
survive the broker's crash and resume at the window after them.
Method: real broker processes (SIGKILL and restart on the same port and
data dir), consumers in this process or in `tests/support/databus_worker.py`
processes that log every callback with unbuffered writes; seeds printed.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sdk import Admin, Producer, Unavailable
from sdk.consumer import ConsumerConfig
from sdk.databus import DatabusClient, DatabusConfig, DatabusConsumerBase, DbusEvent, Scn
from tests.support.broker_process import REPO, BrokerProcess


class Applying(DatabusConsumerBase):
    """Applies events to a dict at on_end_window; records rollbacks, errors and windows."""

    def __init__(self, event_sleep_s: float) -> None:
        self.event_sleep_s = event_sleep_s
        self.staged: dict[Any, bytes] = {}
        self.state: dict[Any, bytes] = {}
        self.windows: list[tuple[int, list[int]]] = []
        self.current: list[int] = []
        self.rollbacks: list[int] = []
        self.errors: list[Exception] = []
        self.in_window = False

    def on_start_window(self, scn: Scn) -> None:
        self.staged, self.current, self.in_window = {}, [], True

    async def on_event(self, event: DbusEvent) -> None:
        await asyncio.sleep(self.event_sleep_s)
        self.staged[event.key] = event.value
        self.current.append(event.offset)

    def on_end_window(self, scn: Scn) -> None:
        self.state.update(self.staged)
        self.windows.append((int(scn), self.current))
        self.in_window = False

    def on_rollback(self, scn: Scn) -> None:
        self.rollbacks.append(int(scn))
        self.staged, self.current = {}, []

    def on_error(self, error: Exception) -> None:
        self.errors.append(error)


async def until(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.01)


async def produce(address: str, topic: str, first_window: int, windows: int, size: int,
                  partition: int = 0) -> list[tuple[int, list[int]]]:
    """Windows of `size` events, keys window*1000+i; returns (scn, offsets) per window."""
    made = []
    async with await Producer.create(address, topic, delivery_timeout_ms=60_000) as producer:
        for w in range(first_window, first_window + windows):
            result = await producer.send_window(
                [{"key": w * 1000 + i, "value": b"%d" % w, "source": "s"} for i in range(size)],
                partition=partition)
            made.append((result.scn, list(result.offsets)))
    return made


def expected_state(windows: int, size: int) -> dict[int, bytes]:
    return {w * 1000 + i: b"%d" % w for w in range(windows) for i in range(size)}


@pytest.mark.parametrize("path", ["log", "key_shared", "key_shared_streamed"])
def test_a_broker_killed_mid_window_is_no_rollback_with_buffering(tmp_path: Path,
                                                                  path: str) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    buffering = path != "key_shared_streamed"
    size = 60 if path == "log" else 120
    consumer = Applying(event_sleep_s=0.002)

    async def go() -> list[tuple[int, list[int]]]:
        async with Admin(broker.address) as admin:
            await admin.create_topic("crash", partitions=1)
        made = await produce(broker.address, "crash", 0, 6, size)
        config = DatabusConfig(window_buffering=buffering, unavailable_report_ms=300,
                               prefetch_windows_max=1, checkpoint_windows_n=1)
        client = DatabusClient(broker.address, config=config)
        if path == "log":
            client.register(consumer, topic="crash", name="log")
        else:
            client.register_shared(consumer, topic="crash", subscription="crash",
                                   consumer_config=ConsumerConfig(
                                       type="key_shared", start="earliest",
                                       receiver_queue_size=8))
        async with client:
            await until(lambda: len(consumer.windows) >= 2 and consumer.in_window
                        and len(consumer.current) >= 10)
            assert consumer.in_window  # mid-window, for the consumer
            await asyncio.to_thread(broker.kill)
            await until(lambda: bool(consumer.errors), 20)  # the outage is reported
            await asyncio.to_thread(broker.start)
            made += await produce(broker.address, "crash", 6, 3, size)
            await until(lambda: {scn for scn, _ in consumer.windows} >=
                        {scn for scn, _ in made})
        return made

    try:
        made = asyncio.run(go())
    finally:
        broker.stop()
    assert any(isinstance(e, Unavailable) for e in consumer.errors)
    offsets = dict(made)
    for scn, presented in consumer.windows:
        assert presented == offsets[scn], f"window {scn} was not presented whole"
    assert consumer.state == expected_state(9, size)
    if buffering:
        assert consumer.rollbacks == []
        if path == "log":  # the log resumes after the last window read: none twice
            assert [scn for scn, _ in consumer.windows] == [scn for scn, _ in made]
    else:
        assert consumer.rollbacks, "a streamed window cut by the broker's crash rolls back"


# ---------------------------------------------------------------- restart cycles

def parse_runs(log_text: str) -> list[list[tuple[str, ...]]]:
    runs: list[list[tuple[str, ...]]] = []
    for line in log_text.splitlines():
        fields = tuple(line.split())
        if not fields:
            continue
        if fields[0] == "S":
            runs.append([])
        else:
            runs[-1].append(fields)
    return runs


def occurrences(run: list[tuple[str, ...]]) -> list[tuple[int, int, list[int], bool]]:
    """(partition, scn, event offsets, complete) for each window presented in a run."""
    found: list[tuple[int, int, list[int], bool]] = []
    for fields in run:
        if fields[0] == "W":
            found.append((int(fields[1]), int(fields[2]), [], False))
        elif fields[0] == "E":
            assert found and (int(fields[1]), int(fields[2])) == found[-1][:2]
            found[-1][2].append(int(fields[3]))
        elif fields[0] == "X":
            partition, scn, events, _ = found[-1]
            assert (partition, scn) == (int(fields[1]), int(fields[2]))
            found[-1] = (partition, scn, events, True)
    return found


def start_worker(broker: BrokerProcess, log: Path, checkpoints: Path | None, *extra: str
                 ) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    store = ["--checkpoints", str(checkpoints)] if checkpoints else ["--broker-checkpoints"]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.databus_worker", broker.address, "cycles",
         str(log), *store, *extra],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["file", "broker"])
def test_sigkilled_consumer_processes_every_window_whole_and_skips_none(
        tmp_path: Path, store: str) -> None:
    """Checkpoints in a file store (12 kills) or the broker-held store (10 kills)."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    log = tmp_path / "calls.log"
    checkpoints = tmp_path / "checkpoints" if store == "file" else None
    made: list[tuple[int, int, list[int]]] = []
    cycles = 12 if store == "file" else 10

    async def producing(stop: asyncio.Event) -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("cycles", partitions=2)
        async with await Producer.create(broker.address, "cycles") as producer:
            w = 0
            while not stop.is_set() or w < 40:
                size = rng.choice([1, 2, 5, 20, 60, 150])
                partition = w % 2
                result = await producer.send_window(
                    [{"key": w * 1000 + i, "value": b"v", "source": "s"} for i in range(size)],
                    partition=partition)
                made.append((partition, result.scn, list(result.offsets)))
                w += 1
                await asyncio.sleep(rng.uniform(0.005, 0.03))

    async def cycle_workers() -> None:
        stop = asyncio.Event()
        producer = asyncio.create_task(producing(stop))
        for cycle in range(cycles):
            worker = start_worker(broker, log, checkpoints, "--event-sleep-ms", "0.3",
                                  "--checkpoint-windows", str(rng.choice([1, 1, 2, 3])))
            await until(lambda n=cycle + 1: log.exists() and log.read_text().count("S ") >= n,
                        30)
            await asyncio.sleep(rng.uniform(0.1, 0.6))
            worker.send_signal(signal.SIGKILL)
            worker.wait(10)
        stop.set()
        await producer
        worker = start_worker(broker, log, checkpoints)
        wanted = {(p, scn) for p, scn, _ in made}

        def all_done() -> bool:
            done = {(o[0], o[1]) for run in parse_runs(log.read_text()) for o in occurrences(run)
                    if o[3]}
            return wanted <= done
        try:
            await until(all_done, 60)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(10)

    try:
        asyncio.run(cycle_workers())
    finally:
        broker.stop()
    runs = parse_runs(log.read_text())
    assert len(runs) == cycles + 1, f"seed {seed}"
    windows = {(p, scn): offsets for p, scn, offsets in made}
    order = {p: [scn for q, scn, _ in made if q == p] for p in (0, 1)}
    complete: set[tuple[int, int]] = set()
    partial = 0
    next_expected: dict[int, int] = {0: 0, 1: 0}  # index in order[p] of the first not done
    for run in runs:
        found = occurrences(run)
        firsts: dict[int, int] = {}
        for i, (p, scn, events, whole) in enumerate(found):
            key = (p, scn)
            assert events == windows[key][:len(events)], f"seed {seed}: {key} not from its start"
            if whole:
                assert events == windows[key], f"seed {seed}: {key} ended without all events"
                complete.add(key)
            else:
                assert i == len(found) - 1, f"seed {seed}: {key} cut short, then went on"
                partial += 1
            index = order[p].index(scn)
            if p not in firsts:
                firsts[p] = index  # a restart: not past the first window left undone
                assert index <= next_expected[p], f"seed {seed}: partition {p} skipped a window"
            elif whole:
                assert index == firsts[p], f"seed {seed}: partition {p} out of order"
            if whole:
                firsts[p] = index + 1
                next_expected[p] = max(next_expected[p], index + 1)
    assert complete == set(windows), f"seed {seed}: windows never processed whole"
    print(f"seed {seed}: {len(windows)} windows, {cycles} kills, {partial} cut by a kill, "
          f"{store} checkpoints")


# ---------------------------------------------------------------- across processes

def test_two_processes_share_a_key_shared_subscription(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    logs = [tmp_path / "a.log", tmp_path / "b.log"]

    async def go() -> list[tuple[int, list[int]]]:
        async with Admin(broker.address) as admin:
            await admin.create_topic("cycles", partitions=1)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        workers = [subprocess.Popen([sys.executable, "-m", "tests.support.databus_worker",
                                     broker.address, "cycles", str(log), "--shared", "sub"],
                                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                   for log in logs]
        try:
            await until(lambda: all(log.exists() and "S " in log.read_text() for log in logs))
            await asyncio.sleep(0.5)  # both attached: the ranges are split
            made = await produce(broker.address, "cycles", 0, 30, 40)
            every = {o for _, offsets in made for o in offsets}

            def presented() -> set[int]:
                return {o for log in logs for run in parse_runs(log.read_text())
                        for p, scn, events, whole in occurrences(run) if whole for o in events}
            await until(lambda: presented() >= every, 60)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.wait(10)
        return made

    try:
        made = asyncio.run(go())
    finally:
        broker.stop()
    windows = dict(made)
    seen: list[int] = []
    for log in logs:
        found = [o for run in parse_runs(log.read_text()) for o in occurrences(run)]
        assert found, f"{log.name} got no share"
        assert all(whole for *_, whole in found)  # every presented share ended
        for _, scn, events, _ in found:
            assert set(events) <= set(windows[scn]) and events == sorted(events)
        seen += [o for *_, events, _ in found for o in events]
        assert log.read_text().rstrip().endswith("Q")  # SIGTERM: a clean stop
    assert sorted(seen) == sorted(o for offsets in windows.values() for o in offsets)


# ---------------------------------------------------------------- the broker-held store

def test_checkpoints_in_the_broker_survive_its_crash_and_resume_after_the_window(
        tmp_path: Path) -> None:
    from sdk.stores import BrokerCheckpointStore

    broker = BrokerProcess(tmp_path / "data")
    broker.start()

    async def consume(until_scn: int) -> list[int]:
        consumer = Applying(event_sleep_s=0)
        store = BrokerCheckpointStore(broker.address)
        client = DatabusClient(broker.address, checkpoint_store=store, namespace="ns")
        client.register(consumer, topic="held", name="billing")
        async with client:
            await until(lambda: any(scn == until_scn for scn, _ in consumer.windows))
        await store.close()
        return [scn for scn, _ in consumer.windows]

    async def go() -> tuple[list[int], list[int], Any]:
        async with Admin(broker.address) as admin:
            await admin.create_topic("held", partitions=1)
        first = await produce(broker.address, "held", 0, 3, 5)
        seen_first = await consume(first[-1][0])
        await asyncio.to_thread(broker.kill)  # the checkpoint was fsynced before the ack
        await asyncio.to_thread(broker.start)
        store = BrokerCheckpointStore(broker.address)
        checkpoint = await store.get_checkpoint("ns", "held", "billing", 0)
        await store.close()
        second = await produce(broker.address, "held", 3, 2, 5)
        seen_second = await consume(second[-1][0])
        return seen_first, seen_second, (checkpoint, first, second)

    try:
        seen_first, seen_second, (checkpoint, first, second) = asyncio.run(go())
    finally:
        broker.stop()
    assert seen_first == [scn for scn, _ in first]
    assert (checkpoint.scn, checkpoint.offset) == (first[-1][0], first[-1][1][-1])
    assert seen_second == [scn for scn, _ in second]  # the first window after the checkpoint
