"""A Databus partition's bootstrap stays in one incarnation of its topic.

Goal: the bootstrap a partition switches to when its log read fell behind
retention is asked of the incarnation that log read was of, and a new
snapshot started after a bootstrap lost its log is asked of the incarnation
the lost one was of (given, or learned from the broker's first message), so
a topic deleted and created again in between is refused (TopicRecreated, to
on_error) instead of feeding the new topic into state built from the old.
The old code made each of those Readers without an incarnation.
Method: `read_bootstrap` and `LogWindows._read_log` with the Reader replaced
by a fake that records what it was given and ends as scripted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from sdk import errors
from sdk.bootstrap import SNAPSHOT, BootstrapPosition
from sdk.databus import log_bootstrap, log_windows
from sdk.databus.log_bootstrap import BootstrapStart, read_bootstrap
from sdk.databus.log_windows import LogWindows

OLD = "5f0c9a1e2b3d4c6a"


class FakeReader:
    """A Reader that learns `learns` (as from the broker's first message), then ends
    with the next scripted error."""

    made: list[FakeReader] = []
    script: list[BaseException] = []
    learns: str | None = None

    def __init__(self, *args: Any, incarnation: str | None = None, **kwargs: Any) -> None:
        self.given = incarnation
        self.incarnation = incarnation
        self.position = None
        FakeReader.made.append(self)

    async def items(self) -> AsyncIterator[Any]:
        self.incarnation = self.incarnation or FakeReader.learns
        raise FakeReader.script.pop(0)
        yield  # an async generator

    async def close(self) -> None:
        pass


def _source() -> Any:
    async def put(item: object) -> None:
        pass

    return SimpleNamespace(inbox=SimpleNamespace(put=put), name="billing", broker="127.0.0.1:1",
                           topic="t", key_filter=None, sources=None, channel=None,
                           config=SimpleNamespace(reader_bytes_max=0), need_slots=False,
                           connection_changed=None, bootstrap=True, _readers={})


def _script(monkeypatch: pytest.MonkeyPatch, learns: str | None,
            script: list[BaseException]) -> None:
    monkeypatch.setattr(log_bootstrap, "Reader", FakeReader)
    FakeReader.made, FakeReader.script, FakeReader.learns = [], script, learns


def _gone() -> errors.OffsetOutOfRange:
    return errors.OffsetOutOfRange("the log at the snapshot's point was removed",
                                   grpc.StatusCode.OUT_OF_RANGE)


def _recreated() -> errors.TopicRecreated:
    return errors.TopicRecreated("deleted and created again", grpc.StatusCode.FAILED_PRECONDITION)


def test_a_new_snapshot_is_asked_of_the_incarnation_the_lost_bootstrap_was_of(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _script(monkeypatch, OLD, [_gone(), _recreated()])
    saved = BootstrapStart(BootstrapPosition(SNAPSHOT, 5, "s", 3), 2)
    with pytest.raises(errors.TopicRecreated):
        asyncio.run(read_bootstrap(_source(), 0, saved))
    assert [r.given for r in FakeReader.made] == [None, OLD]  # the old code: [None, None]


def test_a_bootstrap_is_asked_of_the_incarnation_it_starts_with(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _script(monkeypatch, None, [_recreated()])
    with pytest.raises(errors.TopicRecreated):
        asyncio.run(read_bootstrap(_source(), 0, BootstrapStart(incarnation=OLD)))
    assert [r.given for r in FakeReader.made] == [OLD]


def test_a_log_read_that_fell_behind_bootstraps_the_topic_it_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[BootstrapStart] = []

    async def bootstrap(source: object, partition: int, start: BootstrapStart) -> None:
        started.append(start)

    monkeypatch.setattr(log_windows, "read_bootstrap", bootstrap)
    _script(monkeypatch, OLD, [_gone()])
    source = _source()
    source._readers = {0: FakeReader()}
    asyncio.run(LogWindows._read_log(source, 0, "earliest"))
    assert started == [BootstrapStart(incarnation=OLD)]  # the old code: BootstrapStart()
