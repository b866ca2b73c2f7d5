"""A view pass that keeps failing is logged once with its traceback, then one line per
retry at doubling intervals (it wrote a traceback every second per partition, forever:
about 5 MB in 13 minutes for 7 partitions); a pass that works again says so."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.supervision import RestartBackoff
from broker.view import service
from broker.view.codec import ViewState


class FailingViews:
    """A view store whose passes raise until `heal()`: then one pass folds to the end."""

    def __init__(self) -> None:
        self.calls = 0
        self.healed = False

    def state(self, topic_id: int, partition: int) -> ViewState:
        return ViewState(0, 0, 0, 0, 0)

    def gap(self, topic_id: int, partition: int) -> int:
        return 0  # a complete view

    def fold_pass(self, topic_id: int, partition: int, end: int, events_max: int,
                  bytes_max: int) -> ViewState:
        self.calls += 1
        if not self.healed:
            raise ValueError("source of 65536 bytes is over 65535")
        return ViewState(end, 1, 1, 0, 1)

    def sweep(self, topic_id: int, partition: int, before_ms: int, entries_max: int
              ) -> ViewState:
        return ViewState(10, 1, 1, 0, 1)


class InlineWorker:
    def run(self, work: Any, *args: Any, backlog: bool = False) -> asyncio.Future[ViewState]:
        future: asyncio.Future[ViewState] = asyncio.get_running_loop().create_future()
        try:
            future.set_result(work(*args))
        except Exception as e:
            future.set_exception(e)
        return future


class Log:
    end_offset = 10
    meta = SimpleNamespace(name="t", topic_id=1, delete_retention_ms=0)
    index = 0

    async def wait_for_data(self, offset: int) -> None:
        await asyncio.sleep(3600)


async def fail_then_heal(view: service.PartitionView, views: FailingViews, failures: int
                         ) -> None:
    """Start the view, let its passes fail `failures` times, heal the store and wait
    (bounded: 5 s each) for a pass to fold to the end."""
    view.start()
    for _ in range(1000):
        await asyncio.sleep(0.005)
        if views.calls >= failures:
            break
    views.healed = True
    for _ in range(1000):
        await asyncio.sleep(0.005)
        if view.state.offset_next == 10:
            break


def test_a_pass_failing_for_good_is_one_traceback_then_one_line_a_retry(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(service, "ERROR_BACKOFF", RestartBackoff(1, 8))
    views = FailingViews()
    settings = Settings(view_linger_ms=0)

    async def run() -> None:
        view = service.PartitionView(views, Log(), settings, InlineWorker())  # type: ignore[arg-type]
        await fail_then_heal(view, views, 8)  # 8 failures take about 30 ms
        await view.stop()

    with caplog.at_level(logging.WARNING, logger="keybus.view"):
        asyncio.run(run())
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) >= 8
    assert [r.exc_info is not None for r in failures] == [True] + [False] * (len(failures) - 1)
    assert "ValueError: source of 65536 bytes is over 65535" in failures[1].getMessage()
    assert "retrying in 8 ms" in failures[-1].getMessage()  # doubled to the cap
    assert "work again after" in caplog.records[-1].getMessage()


class UnreadableViews(FailingViews):
    """Passes meet a damaged block (the store's BrokerError) until `heal()`."""

    def fold_pass(self, topic_id: int, partition: int, end: int, events_max: int,
                  bytes_max: int) -> ViewState:
        if not self.healed:
            self.calls += 1
            raise BrokerError("store_unreadable", what="t/0 offset 3", cause="Corruption")
        return super().fold_pass(topic_id, partition, end, events_max, bytes_max)


def test_a_store_error_is_reported_and_retried_not_taken_for_the_partition_closing(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Before, any BrokerError ended the maintainer without a word: the view stayed
    behind for good, and retention, which waits for it, with it."""
    monkeypatch.setattr(service, "ERROR_BACKOFF", RestartBackoff(1, 8))
    views = UnreadableViews()

    async def run() -> int:
        view = service.PartitionView(views, Log(), Settings(view_linger_ms=0),  # type: ignore[arg-type]
                                     InlineWorker())  # type: ignore[arg-type]
        await fail_then_heal(view, views, 3)
        offset = view.state.offset_next
        await view.stop()
        return offset

    with caplog.at_level(logging.WARNING, logger="keybus.view"):
        assert asyncio.run(run()) == 10  # folded to the end once the store reads again
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) >= 3 and failures[0].exc_info is not None
    assert "t/0 offset 3 cannot be read" in failures[1].getMessage()
