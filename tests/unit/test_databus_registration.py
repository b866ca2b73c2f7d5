"""The registration loop (sdk/databus/registration.py): stops, start failures, bugs.

Goal: the loop's two rules. (1) Whatever ends consumption reaches the
consumers: a source that cannot open gets on_start_consumption, on_error
with the cause, on_stop_consumption and a WARNING; an unexpected exception
(a bug) gets on_error and on_stop_consumption and is logged with its
traceback; `stop()` raises neither, `wait()` raises it. (2) With sync
callbacks and a full inbox the loop still yields to the event loop between
windows, so a stop asked for by another task takes effect at the next window,
and other tasks on the loop are not starved. (3) A broker outage is told while
read-ahead windows are still being presented, not only once the inbox is empty.
Method: a real `DatabusRegistration`, runner and executor on a real event
loop, fed by a small fake window source (an inbox filled at open, or an open
that raises); no broker. Windows are one-event windows of a plain batch,
made by the same `record_pieces` the log source uses.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from sdk import errors
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus import registration as registration_module
from sdk.databus.callbacks import DatabusConsumerBase
from sdk.databus.config import DatabusConfig
from sdk.databus.event import DbusEvent
from sdk.databus.inbox import Inbox, Item, MarkerItem, PieceItem
from sdk.databus.pieces import record_pieces
from sdk.databus.registration import DatabusRegistration
from sdk.databus.results import SUCCESS, CallbackResult
from sdk.databus.window import Scn

WINDOWS = 300


def one_event_windows(count: int) -> list[Item]:
    record = pb.Record(topic="t", partition=0, base_offset=0, scn_first=1)
    record.batch.count = count
    record.batch.key_ints.extend(range(count))
    record.batch.values.extend(b"v" for _ in range(count))
    return [PieceItem(piece, True) for piece in record_pieces(record, need_slots=False)]


class FakeSource:
    """A window source whose open fills the inbox with `items`, or raises `open_error`."""

    def __init__(self, items: list[Item], open_error: Exception | None = None) -> None:
        self.inbox = Inbox(len(items) + 1)
        self.items = items
        self.open_error = open_error
        self.closed = False

    async def open(self) -> None:
        if self.open_error is not None:
            raise self.open_error
        for item in self.items:
            await self.inbox.put(item)

    def health(self, now_ms: int) -> Exception | None:
        return None

    async def persist(self, partition: int, offset: int, scn: int,
                      position: object = None) -> None:
        pass

    async def close(self) -> None:
        self.closed = True


class Recorder(DatabusConsumerBase):
    """Records its lifecycle calls and counts windows; `at_window_1` is set after window 1."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.windows = 0
        self.at_window_1 = asyncio.Event()

    def on_start_consumption(self) -> CallbackResult:
        self.calls.append("start")
        return SUCCESS

    def on_event(self, event: DbusEvent) -> CallbackResult:
        return SUCCESS

    def on_end_window(self, scn: Scn) -> CallbackResult:
        self.windows += 1
        if self.windows == 1:
            self.at_window_1.set()
        return SUCCESS

    def on_error(self, error: Exception) -> CallbackResult:
        self.calls.append(("error", error))
        return SUCCESS

    def on_stop_consumption(self) -> CallbackResult:
        self.calls.append("stop")
        return SUCCESS


def registration(consumer: Recorder, source: FakeSource) -> DatabusRegistration:
    config = DatabusConfig(checkpoint_windows_n=0)  # no checkpoint write: nothing awaits
    return DatabusRegistration("r", "t", [consumer], None, config, source)


@pytest.fixture
def yield_each_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop yields before every item (not each millisecond): what another task
    sees is then exact, whatever the machine's speed."""
    monkeypatch.setattr(registration_module, "YIELD_EVERY_S", 0.0)


@pytest.mark.usefixtures("yield_each_item")
def test_a_stop_from_another_task_takes_effect_at_the_next_window() -> None:
    async def go() -> tuple[int, int]:
        consumer = Recorder()
        reg = registration(consumer, FakeSource(one_event_windows(WINDOWS)))
        reg.start()
        await consumer.at_window_1.wait()
        at_request = consumer.windows
        await reg.stop()
        await reg.wait()
        return at_request, consumer.windows

    at_request, presented = asyncio.run(go())
    assert presented - at_request <= 1, f"{presented - at_request} windows after stop()"
    assert presented < WINDOWS


@pytest.mark.usefixtures("yield_each_item")
def test_other_tasks_run_between_windows() -> None:
    async def go() -> tuple[int, int]:
        consumer = Recorder()
        source = FakeSource(one_event_windows(WINDOWS))
        reg = registration(consumer, source)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticking = asyncio.ensure_future(ticker())
        reg.start()
        while consumer.windows < WINDOWS:
            await asyncio.sleep(0.01)
        ticking.cancel()
        await reg.stop()
        return ticks, consumer.windows

    ticks, windows = asyncio.run(go())
    assert windows == WINDOWS
    assert ticks >= WINDOWS // 2, f"another task ran {ticks} times during {windows} windows"


def test_other_tasks_wait_at_most_about_a_slice_of_the_loop() -> None:
    """With the default slice (1 ms), a full read-ahead of one-event windows never holds
    the loop for long: before, 5,000 of them ran without a turn for anyone else."""
    async def go() -> tuple[float, int]:
        consumer = Recorder()
        reg = registration(consumer, FakeSource(one_event_windows(5_000)))
        gaps: list[float] = []

        async def ticker() -> None:
            # The loop thread's CPU time between two turns: what the registration's work
            # held the loop for. Not the wall clock, which also counts the time another
            # process had the core (a loaded machine), which no slice can help.
            last = time.thread_time()
            while True:
                await asyncio.sleep(0)
                now = time.thread_time()
                gaps.append(now - last)
                last = now

        ticking = asyncio.ensure_future(ticker())
        reg.start()
        for _ in range(3_000):  # bounded: at most 30 s
            if consumer.windows >= 5_000:
                break
            await asyncio.sleep(0.01)
        ticking.cancel()
        await reg.stop()
        return max(gaps), consumer.windows

    longest, windows = asyncio.run(go())
    assert windows == 5_000
    assert longest < 0.05, f"another task waited {longest * 1000:.1f} CPU-ms for a turn"


def test_a_source_that_cannot_open_is_reported_to_the_consumers(
        caplog: pytest.LogCaptureFixture) -> None:
    cause = errors.TopicNotFound("topic 'gone' does not exist; create it first")

    with caplog.at_level(logging.INFO, logger="keybus.databus"):
        consumer, raised = asyncio.run(_stopped(FakeSource([], open_error=cause)))
    assert consumer.calls == ["start", ("error", cause), "stop"]
    assert raised is cause
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("cannot start" in r.getMessage() and "gone" in r.getMessage() for r in warnings)


def test_a_bug_in_open_reaches_the_consumers_and_the_log_with_its_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="keybus.databus"):
        consumer, raised = asyncio.run(
            _stopped(FakeSource([], open_error=KeyError("on_start_bootstrap"))))
    assert isinstance(raised, KeyError)
    assert consumer.calls == ["start", ("error", raised), "stop"]
    assert any(r.levelno >= logging.WARNING and r.exc_info for r in caplog.records)


def test_a_bug_during_consumption_reaches_the_consumers_and_stop_does_not_raise(
        caplog: pytest.LogCaptureFixture) -> None:
    """A bootstrap marker reaching plain consumers (the executor has no such callback)."""

    source = FakeSource([*one_event_windows(2), MarkerItem("on_start_bootstrap")])
    with caplog.at_level(logging.INFO, logger="keybus.databus"):
        consumer, raised = asyncio.run(_stopped(source, until_ended=True))
    assert source.closed
    assert isinstance(raised, RuntimeError) and "on_start_bootstrap" in str(raised)
    assert consumer.windows == 2
    assert consumer.calls == ["start", ("error", raised), "stop"]
    assert any(r.levelno == logging.ERROR and r.exc_info for r in caplog.records)


async def _stopped(source: FakeSource, until_ended: bool = False
                   ) -> tuple[Recorder, BaseException | None]:
    """Start a registration over `source`, stop it (`until_ended`: once consumption
    ended by itself, 5 s at most) and return its consumer and what `wait()` raised.
    `stop()` itself must not raise the registration's error (the old loop let a bug
    escape from there)."""
    consumer = Recorder()
    reg = registration(consumer, source)
    reg.start()
    for _ in range(500 if until_ended else 0):
        if not reg.running:
            break
        await asyncio.sleep(0.01)
    await reg.stop()
    try:
        await reg.wait()
    except Exception as e:
        return consumer, e
    return consumer, None


class OutageSource(FakeSource):
    """Its broker link goes down once the consumer has ended its first window."""

    def __init__(self, items: list[Item], consumer: Recorder) -> None:
        super().__init__(items)
        self.consumer = consumer
        self.told = False

    def health(self, now_ms: int) -> Exception | None:
        if self.consumer.windows >= 1 and not self.told:
            self.told = True
            return errors.Unavailable("broker b unreachable for 5000 ms")
        return None


class SlowRecorder(Recorder):
    """Each event takes at least 1 ms: the windows take longer than a health interval."""

    async def on_event(self, event: DbusEvent) -> CallbackResult:  # type: ignore[override]
        await asyncio.sleep(0.001)
        return SUCCESS

    def on_error(self, error: Exception) -> CallbackResult:
        self.calls.append(("error", self.windows))
        return SUCCESS


def test_an_outage_is_told_while_read_ahead_windows_are_worked_off() -> None:
    """300 windows of at least 1 ms each are queued; the link goes down after the
    first. The notice comes between windows (every 200 ms), not after the last."""
    async def go() -> list[Any]:
        consumer = SlowRecorder()
        reg = registration(consumer, OutageSource(one_event_windows(WINDOWS), consumer))
        reg.start()
        for _ in range(600):  # bounded: 60 s
            if consumer.windows == WINDOWS:
                break
            await asyncio.sleep(0.1)
        await reg.stop()
        await reg.wait()
        return consumer.calls

    calls = asyncio.run(go())
    told = [call[1] for call in calls if isinstance(call, tuple)]
    assert len(told) == 1 and told[0] < WINDOWS, calls
