"""Goal: the stages benchmark's split of the broker's event-loop CPU (benchmarks/loop_cpu.py)
counts what it says: the main thread's calls only, each call's own time once (a nested
call in its own line, not in the outer step's), and per-commit figures whose steps and
remainder add up to the loop's whole.

Method: functions wrapped as the broker's are, called from this thread and another, and
a hand-made report with known answers.
"""

from __future__ import annotations

import threading
import time

from benchmarks import loop_cpu


def _busy(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_only_the_main_threads_calls_count_each_its_own_time() -> None:
    tally = loop_cpu.Tally()
    inner = loop_cpu._counted(tally, "X.inner", lambda: _busy(0.002), threading.get_ident())

    def outer_step() -> None:
        _busy(0.002)
        inner()

    outer = loop_cpu._counted(tally, "X._submit", outer_step, threading.get_ident())
    outer()
    inner()
    elsewhere = threading.Thread(target=inner)
    elsewhere.start()
    elsewhere.join()
    report = tally.report()
    assert report["steps"]["X._submit"][0] == 1 and report["steps"]["X.inner"][0] == 2
    submit_s, inner_s = report["steps"]["X._submit"][1], report["steps"]["X.inner"][1]
    assert 0.002 <= submit_s < 0.0035  # its own 2 ms: the nested call counts in its line
    assert inner_s >= 0.004  # both calls made on this thread, not the other thread's
    assert report["loop_total_s"] >= 0.006  # from the first _submit to the last call
    assert report["loop_total_s"] >= submit_s + inner_s


def test_per_commit_figures_add_up_to_the_loop() -> None:
    report = {"steps": {"ProduceServicer._submit": [100, 0.005],
                        "PartitionDispatcher._deliver": [400, 0.012]},
              "loop_total_s": 0.05}
    rows = {r["step"]: r for r in loop_cpu.per_commit(report, 100)}
    assert rows["PartitionDispatcher._deliver"]["calls_per_commit"] == 4.0
    assert rows["PartitionDispatcher._deliver"]["us_per_call"] == 30.0
    assert rows["PartitionDispatcher._deliver"]["us_per_commit"] == 120.0
    assert rows["ProduceServicer._submit"]["share"] == 0.1
    assert rows["in no step"]["us_per_commit"] == 330.0  # 500 - 120 - 50
    assert rows["**the loop in all**"]["us_per_commit"] == 500.0
    assert next(iter(rows)) == "PartitionDispatcher._deliver"  # largest first
    assert "| in no step |" in loop_cpu.table(list(rows.values()))
