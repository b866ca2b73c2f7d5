"""The window runner (sdk/databus/runner.py): rollback, retries, FATAL, checkpoints, stops.

Goal: every rule of the runner's docstring, and that for any mix of windows
and failures a consumer that applies events to a dict ends where a run
without failures would (up to the window consumption stopped at), that
windows complete in order and none is skipped, and that checkpoints are
written for whole windows only, in increasing SCN order per partition.
Method: a `Harness` is the shell in miniature (no asyncio): it makes each
segment's calls on scripted members, records them, and answers the runner.
Scenarios for each rule, then hypothesis over windows and failure scripts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.databus.config import DatabusConfig
from sdk.databus.errors import ConsumerFatal, WindowRetriesExhausted, WindowTooLarge
from sdk.databus.results import (
    CHECKPOINT,
    ERROR,
    FATAL,
    SKIP_CHECKPOINT,
    SUCCESS,
    CallbackResult,
    merge,
    normalize,
)
from sdk.databus.runner import WindowRunner
from sdk.databus.runner_table import (
    TRANSITIONS,
    Finished,
    Persist,
    Phase,
    RunnerStateError,
    Sleep,
)
from sdk.databus.window import EventsCall, Segment, WindowPiece

Event = tuple[int, str, str]  # key, value, source
Oracle = Callable[[int, str, Any], CallbackResult]


def window(scn: int, events: list[Event], partition: int = 0, offset_first: int = 0,
           size_bytes: int = 0) -> WindowPiece:
    return WindowPiece(partition, scn, offset_first + len(events) - 1, range(len(events)),
                       [source for _, _, source in events], [],
                       [key % 65536 for key, _, _ in events], events, size_bytes)


def ok(member: int, name: str, arg: Any) -> CallbackResult:
    return SUCCESS


class Harness:
    """The shell in miniature: members that apply events to a dict at on_end_window."""

    def __init__(self, config: DatabusConfig | None = None, members: int = 1,
                 order: tuple[str, ...] | None = None, oracle: Oracle = ok) -> None:
        self.runner = WindowRunner(config or DatabusConfig(), members, order)
        self.members = members
        self.oracle = oracle
        self.log: list[tuple[int, str, Any]] = []
        self.persisted: list[Persist] = []
        self.persist_error: Callable[[Persist], Exception | None] = lambda p: None
        self.sleeps: list[int] = []
        self.finished: Finished | None = None
        self.now = 0
        self.staged: list[dict[int, str]] = [{} for _ in range(members)]
        self.state: dict[int, str] = {}
        self.carry(self.runner.start(self.now))

    def feed(self, piece: WindowPiece, closes: bool = True) -> None:
        if self.finished is None:
            self.carry(self.runner.process_piece(piece, closes, self.now))

    def stop(self) -> None:
        if self.finished is None:
            self.carry(self.runner.process_stop(self.now))

    def carry(self, step: Any) -> None:
        while step is not None:
            if isinstance(step, Segment):
                step = self.runner.process_result(self.run(step), self.now)
            elif isinstance(step, Persist):
                self.persisted.append(step)
                step = self.runner.process_persisted(self.persist_error(step), self.now)
            elif isinstance(step, Sleep):
                self.sleeps.append(step.ms)
                self.now += step.ms
                step = self.runner.process_slept(self.now)
            else:
                assert isinstance(step, Finished)
                self.finished = step
                return

    def run(self, segment: Segment) -> CallbackResult:
        worst = SUCCESS
        for m in range(self.members):
            for call in segment.calls:
                if isinstance(call, EventsCall):
                    for i in call.slices[m]:
                        event = call.payload[i]  # type: ignore[index]
                        self.log.append((m, "on_event", event))
                        self.staged[m][event[0]] = event[1]
                        worst = merge(worst, self.oracle(m, "on_event", event))
                        if worst.is_failure:
                            return worst
                    continue
                arg = call.args[0] if call.args else None
                self.log.append((m, call.name, arg))
                if call.name == "on_end_window":
                    self.state.update(self.staged[m])
                if call.name in ("on_rollback", "on_start_window"):
                    self.staged[m] = {}
                worst = merge(worst, self.oracle(m, call.name, arg))
                if worst.is_failure:
                    return worst
        return worst

    def calls(self, member: int = 0) -> list[tuple[str, Any]]:
        return [(name, arg) for m, name, arg in self.log if m == member]


WINDOWS = [window(1, [(1, "a", "A"), (2, "b", "A")]),
           window(2, [(3, "c", "A"), (1, "d", "A"), (4, "e", "A")], offset_first=2),
           window(3, [(2, "f", "A")], offset_first=5)]


def failing_once(at_name: str, at_count: int, result: CallbackResult = ERROR) -> Oracle:
    """ERROR (or `result`) from the at_count-th call of at_name (member 0), once."""
    seen = [0]

    def oracle(member: int, name: str, arg: Any) -> CallbackResult:
        if member == 0 and name == at_name:
            seen[0] += 1
            if seen[0] == at_count:
                return result
        return SUCCESS
    return oracle


def test_results_merge_to_the_more_severe() -> None:
    ordered = [SUCCESS, CHECKPOINT, SKIP_CHECKPOINT, ERROR, FATAL]
    for i, first in enumerate(ordered):
        for j, second in enumerate(ordered):
            assert merge(first, second) is ordered[max(i, j)]
    assert [normalize(v) for v in (None, True, False, ERROR, "x")] == \
        [SUCCESS, SUCCESS, ERROR, ERROR, None]


def test_windows_in_order_with_a_checkpoint_after_each() -> None:
    h = Harness()
    for w in WINDOWS:
        h.feed(w)
    h.stop()
    assert h.calls()[:7] == [("on_start_consumption", None), ("on_start_window", 1),
                             ("on_start_source", "A"), ("on_event", (1, "a", "A")),
                             ("on_event", (2, "b", "A")), ("on_end_source", "A"),
                             ("on_end_window", 1)]
    assert h.calls()[7] == ("on_checkpoint", 1)
    assert [(p.offset, p.scn) for p in h.persisted] == [(1, 1), (4, 2), (5, 3)]
    assert h.calls()[-1] == ("on_stop_consumption", None)
    assert h.finished == Finished(None)


def test_error_on_third_event_rolls_back_and_replays_the_window() -> None:
    clean = Harness(members=2)
    failing = Harness(members=2, oracle=failing_once("on_event", 3))
    for h in (clean, failing):
        for w in WINDOWS:
            h.feed(w)
        h.stop()
    assert failing.state == clean.state == {1: "d", 2: "f", 3: "c", 4: "e"}
    for member in (0, 1):
        calls = failing.calls(member)
        rollback = calls.index(("on_rollback", 2))
        assert calls[rollback + 1] == ("on_start_window", 2)  # from the first event again
    assert failing.sleeps == [100]
    assert [p.scn for p in failing.persisted] == [1, 2, 3]


def test_a_failing_window_stops_after_its_retries_and_nothing_after_it_comes() -> None:
    config = DatabusConfig(window_retries_max=3, retry_backoff_ms=10, retry_backoff_max_ms=30)

    def oracle(member: int, name: str, arg: Any) -> CallbackResult:
        return ERROR if name == "on_start_window" and arg == 2 else SUCCESS
    h = Harness(config, oracle=oracle)
    for w in WINDOWS:
        h.feed(w)
    assert h.sleeps == [10, 20, 30]
    assert [arg for name, arg in h.calls() if name == "on_start_window"] == [1, 2, 2, 2, 2]
    assert all(arg != 3 for _, arg in h.calls())
    errors = [arg for name, arg in h.calls() if name == "on_error"]
    assert len(errors) == 1 and isinstance(errors[0], WindowRetriesExhausted)
    assert h.calls()[-1] == ("on_stop_consumption", None)
    assert h.finished is not None and h.finished.error is errors[0]


def test_fatal_stops_at_once_without_a_checkpoint() -> None:
    h = Harness(DatabusConfig(checkpoint_windows_n=0),
                oracle=failing_once("on_event", 3, FATAL))
    for w in WINDOWS:
        h.feed(w)
    assert h.calls()[-2:] == [("on_event", (3, "c", "A")), ("on_stop_consumption", None)]
    assert h.persisted == []
    assert h.finished is not None and isinstance(h.finished.error, ConsumerFatal)


def test_an_error_in_start_consumption_is_fatal() -> None:
    h = Harness(oracle=failing_once("on_start_consumption", 1))
    assert h.calls() == [("on_start_consumption", None), ("on_stop_consumption", None)]
    assert h.finished is not None and isinstance(h.finished.error, ConsumerFatal)


def test_rollback_errors_are_ignored() -> None:
    first_event_fails = failing_once("on_event", 1)

    def oracle(member: int, name: str, arg: Any) -> CallbackResult:
        return ERROR if name == "on_rollback" else first_event_fails(member, name, arg)
    h = Harness(oracle=oracle)
    h.feed(WINDOWS[0])
    names = [name for name, _ in h.calls()]
    assert names.count("on_rollback") == 1 and names.count("on_end_window") == 1
    assert h.finished is None


def test_checkpoint_every_n_windows_and_forced_and_skipped() -> None:
    h = Harness(DatabusConfig(checkpoint_windows_n=2))
    for w in WINDOWS:
        h.feed(w)
    assert [p.scn for p in h.persisted] == [2]
    forced = Harness(DatabusConfig(checkpoint_windows_n=0),
                     oracle=lambda m, n, a: CHECKPOINT if n == "on_end_window" and a == 1
                     else SUCCESS)
    for w in WINDOWS:
        forced.feed(w)
    assert [p.scn for p in forced.persisted] == [1]
    skipped = Harness(oracle=lambda m, n, a: SKIP_CHECKPOINT if n == "on_event" and a[0] == 3
                      else SUCCESS)
    for w in WINDOWS:
        skipped.feed(w)
    assert [p.scn for p in skipped.persisted] == [1, 3]  # window 2 asked not to


def test_on_checkpoint_skip_vetoes_and_error_rolls_back() -> None:
    vetoed = Harness(oracle=lambda m, n, a: SKIP_CHECKPOINT if n == "on_checkpoint" and a == 2
                     else SUCCESS)
    for w in WINDOWS:
        vetoed.feed(w)
    assert [p.scn for p in vetoed.persisted] == [1, 3]
    failing = Harness(oracle=failing_once("on_checkpoint", 2))
    failing.feed(WINDOWS[0])
    failing.feed(WINDOWS[1])
    assert failing.calls()[-1] == ("on_checkpoint", 2)
    assert ("on_rollback", 2) in failing.calls()
    assert [p.scn for p in failing.persisted] == [1, 2]


def test_checkpoint_by_time_on_idle_ticks() -> None:
    h = Harness(DatabusConfig(checkpoint_windows_n=0, checkpoint_interval_ms=1000))
    h.feed(WINDOWS[0])
    h.now = 500
    h.carry(h.runner.process_tick(h.now))
    assert h.persisted == []
    h.now = 1000
    h.carry(h.runner.process_tick(h.now))
    assert [p.scn for p in h.persisted] == [1]
    h.now = 3000
    h.carry(h.runner.process_tick(h.now))
    assert len(h.persisted) == 1  # nothing new pending


def test_a_failed_checkpoint_write_is_reported_and_retried() -> None:
    h = Harness()
    attempts = [0]

    def persist_error(p: Persist) -> Exception | None:
        attempts[0] += 1
        return OSError("disk full") if attempts[0] == 1 else None
    h.persist_error = persist_error
    h.feed(WINDOWS[0])
    assert h.calls()[-1][0] == "on_error" and "disk full" in str(h.calls()[-1][1])
    assert h.runner.pending == {0: (1, 1)}
    h.feed(WINDOWS[1])
    assert [p.scn for p in h.persisted] == [1, 2]
    assert h.runner.pending == {}


def test_stop_checkpoints_what_is_pending() -> None:
    h = Harness(DatabusConfig(checkpoint_windows_n=0))
    h.feed(WINDOWS[0])
    h.feed(window(9, [(5, "x", "A")], partition=1))
    h.stop()
    assert [(p.partition, p.scn) for p in h.persisted] == [(0, 1), (1, 9)]
    assert [name for name, _ in h.calls()][-3:] == ["on_checkpoint", "on_checkpoint",
                                                     "on_stop_consumption"]


def test_a_window_without_our_sources_gets_no_calls_but_counts() -> None:
    h = Harness(order=("A",))
    h.feed(window(1, [(1, "a", "B")]))
    assert [name for name, _ in h.calls()] == ["on_start_consumption", "on_checkpoint"]
    assert [p.scn for p in h.persisted] == [1]


def test_streamed_pieces_and_a_transport_abort() -> None:
    h = Harness()
    first = window(4, [(1, "a", "A")])
    h.feed(first, closes=False)
    assert h.runner.phase is Phase.OPEN
    h.carry(h.runner.process_abort(h.now))
    assert h.calls()[-1] == ("on_rollback", 4) and h.runner.phase is Phase.WAITING
    h.feed(first, closes=False)
    h.feed(window(4, [(2, "b", "B")], offset_first=1), closes=True)
    names = [name for name, _ in h.calls()]
    assert names.count("on_start_window") == 2 and names.count("on_end_window") == 1
    assert h.sleeps == []  # an abort is not a retry
    assert [p.scn for p in h.persisted] == [4]


def test_a_window_over_the_byte_limit_stops_with_a_clear_error() -> None:
    h = Harness(DatabusConfig(window_bytes_max=10))
    h.feed(window(1, [(1, "a", "A")], size_bytes=11))
    assert isinstance(h.calls()[-2][1], WindowTooLarge)
    assert "window_bytes_max=10" in str(h.calls()[-2][1])
    assert h.finished is not None and isinstance(h.finished.error, WindowTooLarge)


def test_inputs_a_phase_does_not_allow_raise() -> None:
    runner = WindowRunner(DatabusConfig(), 1)
    with pytest.raises(RunnerStateError):
        runner.process_piece(WINDOWS[0], True, 0)
    runner.start(0)
    with pytest.raises(RunnerStateError):
        runner.process_tick(0)
    with pytest.raises(RunnerStateError):
        runner.process_abort(0)
    assert all(isinstance(key[0], Phase) for key in TRANSITIONS)


def test_stop_before_start_is_clean() -> None:
    runner = WindowRunner(DatabusConfig(), 1)
    assert runner.process_stop(0) == Finished(None)


# ---------------------------------------------------------------- properties

event_lists = st.lists(st.tuples(st.integers(0, 20), st.sampled_from("uvw"),
                                 st.sampled_from("AB")), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(st.lists(event_lists, min_size=1, max_size=8), st.integers(1, 3),
       st.lists(st.sampled_from([SUCCESS] * 12 + [CHECKPOINT, SKIP_CHECKPOINT, ERROR, ERROR,
                                                  FATAL]), max_size=200),
       st.integers(0, 3))
def test_any_failures_leave_whole_windows_in_order(windows: list[list[Event]], members: int,
                                                   script: list[CallbackResult],
                                                   checkpoint_n: int) -> None:
    """Failures only in data-path calls (events, start/end source, start window), so a
    member's commit at on_end_window is never undone by another member."""
    answers = iter(script)

    def oracle(member: int, name: str, arg: Any) -> CallbackResult:
        if name in ("on_event", "on_start_window", "on_start_source", "on_end_source"):
            return next(answers, SUCCESS)
        return SUCCESS
    config = DatabusConfig(checkpoint_windows_n=checkpoint_n, window_retries_max=2)
    h = Harness(config, members, oracle=oracle)
    pieces = []
    offset = 0
    for i, events in enumerate(windows):
        pieces.append(window(10 + i, events, offset_first=offset))
        offset += len(events)
    for piece in pieces:
        h.feed(piece)
    h.stop()
    starts = [arg for m, name, arg in h.log if m == 0 and name == "on_start_window"]
    assert starts == sorted(starts)  # nothing of a later window before this one is done
    ended = [arg for m, name, arg in h.log if m == 0 and name == "on_end_window"]
    completed = len(ended)
    assert ended == [10 + i for i in range(completed)]  # in order, none skipped
    expected: dict[int, str] = {}
    for events in windows[:completed]:  # presented by source, first appearance first
        for source in dict.fromkeys(source for _, _, source in events):
            expected.update({key: value for key, value, s in events if s == source})
    assert h.state == expected
    scns = [p.scn for p in h.persisted]
    assert scns == sorted(set(scns)) and all(scn in ended for scn in scns)
    assert h.finished is not None
    if h.finished.error is None:
        assert completed == len(windows)
    for m in range(members):
        names = [name for name, _ in h.calls(m)]
        assert names[0] == "on_start_consumption" and names[-1] == "on_stop_consumption"
