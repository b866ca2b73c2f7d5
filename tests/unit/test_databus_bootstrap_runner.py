"""The window runner's bootstrap rule (rule 8 of sdk/databus/runner.py) and the
bootstrap pieces of sdk/databus/log_bootstrap.py.

Goal: markers call on_start_bootstrap / on_end_bootstrap between windows and
a failure there is FATAL; a bootstrap piece is presented with the bootstrap
callbacks, its checkpoint goes through on_bootstrap_checkpoint and carries
the piece's position, its rollback is on_bootstrap_rollback; an ordinary
window after it checkpoints with no position. Snapshot and catch-up pieces
carry the positions a restart resumes from.
Method: the runner test's Harness (a shell in miniature, no asyncio) with
scripted results; pieces built from small records.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sdk.bootstrap import BootstrapPosition
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus.config import DatabusConfig
from sdk.databus.errors import ConsumerFatal
from sdk.databus.event import EventColumns
from sdk.databus.log_bootstrap import catchup_pieces, snapshot_piece
from sdk.databus.results import ERROR, SUCCESS, CallbackResult
from sdk.databus.runner_table import Phase
from sdk.databus.window import BootstrapEventsCall, EventsCall, plan_piece
from tests.unit.test_databus_runner import Harness, failing_once, window

SNAPSHOT = BootstrapPosition("snapshot", 9, "A", 2)


def bootstrap_window(scn: int, events: list[tuple[int, str, str]], position: object,
                     offset_first: int = 0) -> Any:
    return dataclasses.replace(window(scn, events, offset_first=offset_first), bootstrap=True,
                               position=position)


def names(harness: Harness) -> list[str]:
    return [name for name, _ in harness.calls()]


def test_markers_and_bootstrap_sequences_use_the_bootstrap_callbacks() -> None:
    h = Harness()
    h.carry(h.runner.process_marker("on_start_bootstrap", h.now))
    h.feed(bootstrap_window(5, [(1, "a", "A"), (2, "b", "A")], SNAPSHOT))
    h.carry(h.runner.process_marker("on_end_bootstrap", h.now))
    h.feed(window(6, [(3, "c", "A")], offset_first=9))
    h.stop()
    assert names(h) == [
        "on_start_consumption", "on_start_bootstrap",
        "on_start_bootstrap_sequence", "on_start_bootstrap_source", "on_event", "on_event",
        "on_end_bootstrap_source", "on_end_bootstrap_sequence", "on_bootstrap_checkpoint",
        "on_end_bootstrap",
        "on_start_window", "on_start_source", "on_event", "on_end_source", "on_end_window",
        "on_checkpoint", "on_stop_consumption"]
    assert [(p.scn, p.position) for p in h.persisted] == [(5, SNAPSHOT), (6, None)]


def test_a_failed_bootstrap_sequence_rolls_back_with_on_bootstrap_rollback() -> None:
    h = Harness(oracle=failing_once("on_end_bootstrap_sequence", 1))
    h.feed(bootstrap_window(5, [(1, "a", "A")], SNAPSHOT))
    assert "on_bootstrap_rollback" in names(h) and "on_rollback" not in names(h)
    assert h.persisted[-1].position == SNAPSHOT
    assert names(h).count("on_event") == 2  # the sequence came again (the harness logs every event so)


def test_a_failed_marker_callback_is_fatal() -> None:
    def oracle(member: int, name: str, arg: Any) -> CallbackResult:
        return ERROR if name == "on_end_bootstrap" else SUCCESS
    h = Harness(oracle=oracle)
    h.carry(h.runner.process_marker("on_end_bootstrap", h.now))
    assert h.finished is not None and isinstance(h.finished.error, ConsumerFatal)
    assert names(h)[-1] == "on_stop_consumption" and h.runner.phase is Phase.STOPPED


def test_pending_bootstrap_position_is_the_last_piece_s() -> None:
    later = BootstrapPosition("catchup", 9, None, None, 12, 20)
    h = Harness(DatabusConfig(checkpoint_windows_n=0))
    h.feed(bootstrap_window(5, [(1, "a", "A")], SNAPSHOT))
    h.feed(bootstrap_window(7, [(2, "b", "A")], later, offset_first=11))
    h.stop()  # a stop checkpoints what is pending, through on_bootstrap_checkpoint
    assert [(p.offset, p.scn, p.position) for p in h.persisted] == [(11, 7, later)]
    assert "on_bootstrap_checkpoint" in names(h)


def test_plan_of_a_bootstrap_piece_calls_on_bootstrap_event() -> None:
    piece = bootstrap_window(5, [(1, "a", "A")], SNAPSHOT)
    calls = [c for s in plan_piece(piece, True, True, None, bytes(65536), 1) for c in s.calls]
    events = [c for c in calls if isinstance(c, EventsCall)]
    assert len(events) == 1 and isinstance(events[0], BootstrapEventsCall)
    assert events[0].name == "on_bootstrap_event"


def _record(base: int, keys: list[int], offsets: list[int] | None = None,
            scns: list[int] | None = None) -> pb.Record:
    record = pb.Record(topic="t", partition=1, base_offset=base, scn_first=base + 100,
                       publish_time_ms=7,
                       batch=pb.EventBatch(count=len(keys), key_ints=keys,
                                           values=[b"v"] * len(keys), sources=["A"]))
    if offsets is not None:
        record.offsets.extend(offsets)
    if scns is not None:
        record.scns.extend(scns)
        record.publish_times_ms.extend([1_000 + s for s in scns])
    return record


def test_snapshot_and_catch_up_pieces_carry_their_positions() -> None:
    snap = _record(3, [4, 8], offsets=[3, 40], scns=[103, 140])
    piece = snapshot_piece(snap, False, 150, BootstrapPosition("snapshot", 50, "A", 8))
    assert (piece.scn, piece.offset_last, piece.bootstrap) == (150, 49, True)
    columns = piece.payload
    assert isinstance(columns, EventColumns)
    assert [columns.scn_at(i) for i in range(2)] == [103, 140]  # each row's own SCN
    after = BootstrapPosition("catchup", 50, None, None, 53, 60)
    pieces = catchup_pieces(_record(50, [1, 2, 3]), False, after)
    assert [p.position.next_offset for p in pieces] == [51, 52, 53]  # type: ignore[attr-defined]
    assert {(p.position.snapshot_offset, p.position.target_offset)  # type: ignore[attr-defined]
            for p in pieces} == {(50, 60)}
