"""Goal: the stages benchmark's split of the broker's event loop by task
(benchmarks/task_cpu.py) counts each task's own steps: the CPU from one suspending
`await` to the next, nested awaits in their task, a supervised task by its name, and
per-commit rows that add up to the loop's whole.

Method: tasks on a real event loop with the factory installed, busy for known CPU
times, and a hand-made report with known answers.
"""

from __future__ import annotations

import asyncio
import time

from benchmarks import task_cpu


def _busy(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def _inner() -> None:
    _busy(0.002)
    await asyncio.sleep(0)  # suspends: the rest is the outer task's next step
    _busy(0.002)


async def worker() -> int:
    _busy(0.002)
    await _inner()
    return 7


async def supervise(name: str) -> None:  # named as broker/supervision.py's
    _busy(0.001)


def test_each_task_counts_its_own_steps_and_a_supervised_one_by_its_name() -> None:
    tally = task_cpu.Tally()

    async def main() -> int:
        task_cpu.install(asyncio.get_running_loop(), tally)
        result = await asyncio.get_running_loop().create_task(worker())
        await asyncio.create_task(supervise("dispatcher t/0/s"))
        return result

    assert asyncio.run(main()) == 7  # the task's result comes through
    report = tally.report()
    steps, cpu_s = report["worker"]
    assert steps == 2  # up to the sleep, then the rest
    assert 0.006 <= cpu_s < 0.05
    assert report["supervise:dispatcher"][0] == 1
    assert "main" not in report  # created before the factory: not timed


def test_an_exception_thrown_in_counts_and_reaches_the_task() -> None:
    tally = task_cpu.Tally()

    async def waits() -> None:
        await asyncio.sleep(10)

    async def main() -> bool:
        task_cpu.install(asyncio.get_running_loop(), tally)
        task = asyncio.create_task(waits())
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(main())
    assert tally.report()["test_an_exception_thrown_in_counts_and_reaches_the_task"
                          ".<locals>.waits"][0] == 2  # started, then cancelled


def test_per_commit_rows_add_up_to_the_loop() -> None:
    report = {"_handle_exceptions": [1000, 0.024], "supervise:partition": [100, 0.015],
              "tiny": [1, 0.00001]}
    rows = {r["task"]: r for r in task_cpu.per_commit(report, 0.05, 100)}
    assert rows["_handle_exceptions"]["steps_per_commit"] == 10.0
    assert rows["_handle_exceptions"]["us_per_step"] == 24.0
    assert rows["_handle_exceptions"]["us_per_commit"] == 240.0
    assert "tiny" not in rows  # under half a microsecond a commit
    assert rows["in no task step"]["us_per_commit"] == 109.9  # 500 - 240 - 150 - 0.1
    assert rows["**the loop in all**"]["us_per_commit"] == 500.0
    assert next(iter(rows)) == "_handle_exceptions"  # largest first
    assert "| in no task step |" in task_cpu.table(list(rows.values()))


def test_nothing_counts_before_the_gate_opens() -> None:
    open_ = [False]
    tally = task_cpu.Tally(lambda: open_[0])
    tally.add("early", 0.5)
    open_[0] = True
    tally.add("late", 0.25)
    assert tally.report() == {"late": [1, 0.25]}
