"""The group executor (sdk/databus/executor.py): sync fast path, async members, budgets.

Goal: a segment's result is the most severe of its calls; a raise, a bad
return value or a call over its time budget counts as ERROR; async members
run concurrently inside a segment and the first failure cancels the others;
an async call over budget is cancelled, not waited for.
Method: small consumers on a real event loop (no broker: the executor only
makes calls); segments built by the planning core over real event columns.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from sdk.core.pb import keybus_pb2 as pb
from sdk.databus.callbacks import DatabusConsumerBase
from sdk.databus.event import DbusEvent, EventColumns
from sdk.databus.executor import GroupExecutor
from sdk.databus.results import CHECKPOINT, ERROR, FATAL, SUCCESS
from sdk.databus.window import Call, EventsCall, Segment


def columns(count: int) -> EventColumns:
    record = pb.Record(topic="t", partition=0, base_offset=10, scn_first=5, window=True)
    record.batch.count = count
    record.batch.key_ints.extend(range(count))
    record.batch.values.extend(b"v%d" % i for i in range(count))
    record.batch.sources.append("A")
    return EventColumns(record)


def events_segment(count: int, members: int) -> Segment:
    slices = tuple(list(range(m, count, members)) for m in range(members))
    return Segment((Call("on_start_source", ("A", "")), EventsCall("A", columns(count), slices)))


class Recorder(DatabusConsumerBase):
    def __init__(self, result=SUCCESS) -> None:  # type: ignore[no-untyped-def]
        self.keys: list[int | str] = []
        self.result = result

    def on_event(self, event: DbusEvent):  # type: ignore[no-untyped-def]
        self.keys.append(event.key)
        return self.result if event.key == 2 else SUCCESS


def run(executor: GroupExecutor, segment: Segment):  # type: ignore[no-untyped-def]
    return asyncio.run(executor.run(segment))


def test_sync_results_merge_and_every_event_reaches_its_member() -> None:
    members = [Recorder(CHECKPOINT), Recorder()]
    assert run(GroupExecutor(members, 1000), events_segment(4, 2)) is CHECKPOINT
    assert members[0].keys == [0, 2] and members[1].keys == [1, 3]


def test_a_raise_or_a_bad_return_counts_as_error() -> None:
    class Raising(DatabusConsumerBase):
        def on_start_source(self, source: str, schema: str):  # type: ignore[no-untyped-def]
            raise RuntimeError("boom")

    class Bad(DatabusConsumerBase):
        def on_event(self, event: DbusEvent):  # type: ignore[no-untyped-def]
            return "yes"

    assert run(GroupExecutor([Raising()], 1000), events_segment(2, 1)) is ERROR
    assert run(GroupExecutor([Bad()], 1000), events_segment(2, 1)) is ERROR


def test_the_first_failure_stops_the_segment() -> None:
    members = [Recorder(FATAL), Recorder()]
    assert run(GroupExecutor(members, 1000), events_segment(6, 2)) is FATAL
    assert members[0].keys == [0, 2] and members[1].keys == []  # member 1 never started


def test_a_sync_call_over_budget_counts_as_error() -> None:
    class Slow(DatabusConsumerBase):
        def on_event(self, event: DbusEvent):  # type: ignore[no-untyped-def]
            time.sleep(0.03)

    assert run(GroupExecutor([Slow()], call_budget_ms=10), events_segment(1, 1)) is ERROR


def test_the_log_names_the_member_and_callback_of_a_sync_event_call(
        caplog: pytest.LogCaptureFixture) -> None:
    class Slow(DatabusConsumerBase):
        def on_event(self, event: DbusEvent):  # type: ignore[no-untyped-def]
            time.sleep(0.03)

    class Raising(DatabusConsumerBase):
        def on_event(self, event: DbusEvent):  # type: ignore[no-untyped-def]
            raise RuntimeError("boom")

    with caplog.at_level(logging.WARNING, logger="keybus.databus"):
        assert run(GroupExecutor([Recorder(), Slow()], call_budget_ms=10),
                   events_segment(2, 2)) is ERROR
        assert run(GroupExecutor([Recorder(), Raising()], 1000), events_segment(2, 2)) is ERROR
    said = [r.getMessage() for r in caplog.records]
    assert any("on_event of member 1 (Slow) ran" in m for m in said), said
    assert any("on_event of member 1 (Raising) raised at offset 11" in m for m in said), said


def test_a_callback_the_members_lack_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="on_start_bootstrap call reached members"):
        run(GroupExecutor([Recorder()], 1000), Segment((Call("on_start_bootstrap"),)))


def test_async_members_overlap_inside_a_segment() -> None:
    spans: dict[int, list[tuple[float, float]]] = {0: [], 1: []}

    class Sleepy(DatabusConsumerBase):
        def __init__(self, member: int) -> None:
            self.member = member

        async def on_event(self, event: DbusEvent):  # type: ignore[no-untyped-def]
            began = time.monotonic()
            await asyncio.sleep(0.02)
            spans[self.member].append((began, time.monotonic()))

    result = run(GroupExecutor([Sleepy(0), Sleepy(1)], 1000), events_segment(6, 2))
    assert result is SUCCESS
    first_of_1 = spans[1][0][0]
    last_of_0 = spans[0][-1][1]
    assert first_of_1 < last_of_0  # member 1 did not wait for member 0


def test_an_async_call_over_budget_is_cancelled() -> None:
    cancelled = []

    class Stuck(DatabusConsumerBase):
        async def on_end_window(self, scn):  # type: ignore[no-untyped-def]
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

    began = time.monotonic()
    result = run(GroupExecutor([Stuck(), DatabusConsumerBase()], call_budget_ms=50),
                 Segment((Call("on_end_window", (1,)),)))
    assert result is ERROR and cancelled == [True]
    assert time.monotonic() - began < 5


def test_an_async_failure_cancels_the_other_members() -> None:
    reached = []

    class Fails(DatabusConsumerBase):
        async def on_event(self, event: DbusEvent):  # type: ignore[no-untyped-def]
            return ERROR

    class Slow(DatabusConsumerBase):
        async def on_event(self, event: DbusEvent):  # type: ignore[no-untyped-def]
            await asyncio.sleep(0.05)
            reached.append(event.key)

    assert run(GroupExecutor([Fails(), Slow()], 1000), events_segment(8, 2)) is ERROR
    assert len(reached) < 4
