"""The window runner's rule 9: positions the log read passed are checkpointed between windows only.

Goal: a position the broker says the read passed (windows none of whose
events the registration's filter lets through, Databus's end-of-period
event) counts as such windows done: it is checkpointed as the policy says
(every N windows, every T ms, at a clean stop), through on_checkpoint, which
may veto it; never in the middle of a window: while a streamed window is
open the position is ignored and that window still ends normally (its own
checkpoint follows); a position at or below the pending window is stale and
changes nothing. A failed on_checkpoint of a position rolls nothing back.
Method: the runner test's `Harness` (the shell in miniature, no asyncio)
feeds windows and positions; hypothesis mixes them in offset order.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sdk.databus.config import DatabusConfig
from sdk.databus.results import ERROR, SKIP_CHECKPOINT, SUCCESS
from sdk.databus.runner_table import Phase
from tests.unit.test_databus_runner import Harness, window


def passed(h: Harness, offset: int, scn: int, partition: int = 0) -> None:
    if h.finished is None:
        h.carry(h.runner.process_passed(partition, offset, scn, h.now))


def test_a_position_is_checkpointed_like_an_empty_window() -> None:
    h = Harness()
    h.feed(window(1, [(1, "a", "A")]))
    passed(h, 40, 30)
    assert [(p.offset, p.scn) for p in h.persisted] == [(0, 1), (40, 30)]
    assert h.calls()[-1] == ("on_checkpoint", 30)
    assert ("on_start_window", 30) not in h.calls()  # no event, no window callbacks
    assert h.runner.pending == {} and h.runner.phase is Phase.WAITING
    assert h.persisted[-1].position is None  # online


def test_the_policy_counts_a_position_as_one_window_and_a_stop_flushes_it() -> None:
    h = Harness(DatabusConfig(checkpoint_windows_n=3))
    h.feed(window(1, [(1, "a", "A")]))
    passed(h, 10, 8)
    assert h.persisted == [] and h.runner.pending == {0: (10, 8)}
    passed(h, 20, 15)
    assert [(p.offset, p.scn) for p in h.persisted] == [(20, 15)]
    passed(h, 30, 22, partition=1)
    h.stop()
    assert [(p.partition, p.scn) for p in h.persisted] == [(0, 15), (1, 22)]


def test_by_time_on_idle_ticks() -> None:
    h = Harness(DatabusConfig(checkpoint_windows_n=0, checkpoint_interval_ms=1000))
    passed(h, 10, 8)
    assert h.persisted == []
    h.now = 1000
    h.carry(h.runner.process_tick(h.now))
    assert [(p.offset, p.scn) for p in h.persisted] == [(10, 8)]


def test_never_mid_window_the_open_window_ends_normally() -> None:
    h = Harness()
    h.feed(window(4, [(1, "a", "A")], offset_first=10), closes=False)
    passed(h, 30, 9)  # arrives while window 4 is open: ignored
    assert h.runner.phase is Phase.OPEN and h.persisted == []
    h.feed(window(4, [(2, "b", "A")], offset_first=11), closes=True)
    assert [(p.offset, p.scn) for p in h.persisted] == [(11, 4)]
    assert [name for name, _ in h.calls()].count("on_end_window") == 1
    passed(h, 30, 9)  # between windows: taken
    assert [(p.offset, p.scn) for p in h.persisted] == [(11, 4), (30, 9)]


def test_a_stale_position_changes_nothing() -> None:
    h = Harness(DatabusConfig(checkpoint_windows_n=0))
    h.feed(window(5, [(1, "a", "A")], offset_first=20))
    passed(h, 20, 5)
    passed(h, 12, 3)
    assert h.runner.pending == {0: (20, 5)} and h.persisted == []


def test_on_checkpoint_may_veto_a_position_and_an_error_rolls_nothing_back() -> None:
    vetoed = Harness(oracle=lambda m, n, a: SKIP_CHECKPOINT if n == "on_checkpoint" else SUCCESS)
    passed(vetoed, 10, 8)
    assert vetoed.persisted == [] and vetoed.runner.pending == {0: (10, 8)}
    failing = Harness(oracle=lambda m, n, a: ERROR if n == "on_checkpoint" and a == 8
                      else SUCCESS)
    passed(failing, 10, 8)
    assert failing.persisted == [] and failing.sleeps == []
    assert not any(name == "on_rollback" for name, _ in failing.calls())
    failing.feed(window(9, [(1, "a", "A")], offset_first=11))  # the next one covers it
    assert [(p.offset, p.scn) for p in failing.persisted] == [(11, 9)]


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 4)), max_size=30),
       st.integers(0, 4))
def test_checkpoints_only_at_window_ends_and_in_order(script: list[tuple[bool, int]],
                                                      windows_n: int) -> None:
    """Windows and positions in log order (a position is the end of the windows the
    read passed): every checkpoint is the end of a window delivered or passed, and
    they only move forward."""
    h = Harness(DatabusConfig(checkpoint_windows_n=windows_n))
    offset, scn, ends = 0, 0, set()
    for is_window, size in script:
        scn += size
        offset += size
        ends.add((offset - 1, scn))
        if is_window:
            h.feed(window(scn, [(k, "v", "A") for k in range(size)],
                          offset_first=offset - size))
        else:
            passed(h, offset - 1, scn)
    h.stop()
    marks = [(p.offset, p.scn) for p in h.persisted]
    assert all(mark in ends for mark in marks)
    assert marks == sorted(set(marks))
    if script:
        assert marks and marks[-1] == (offset - 1, scn)  # the stop flushed the last one
