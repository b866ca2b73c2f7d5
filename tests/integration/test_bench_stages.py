"""Goal: `python -m benchmarks stages` still joins every event of a short real run (it
wraps private methods of the broker and the SDK; a rename must fail here, not silently
in a long benchmark).

Method: the real traced broker, producer and 2 Key_Shared consumers (in one process, the
`--consumer-processes` path) at 200 events/s for 1 s; every event is joined, its stages add
up to its latency, the broker's WAL fsyncs are timed, and its event loop's CPU is split
by step and by task.
"""

from __future__ import annotations

from benchmarks import stages


def test_a_short_run_joins_every_event() -> None:
    options = stages.parse_args(["--duration-s", "1", "--consumers", "2",
                                 "--consumer-processes", "1", "--no-record"])
    run = stages.run_rate(200, options)
    assert run["events"] == 200
    assert run["joined"] == 200, run
    assert all(stage["samples"] == 200 for stage in run["stages"])
    assert run["total"]["samples"] == 200
    assert run["cpu_cores"]["broker"] > 0
    assert run["consumer_processes"] == 1
    assert 1 <= run["wal_fsync"]["samples"] <= 200  # one per group commit
    # every tick's batch was answered: the producer's round trip of each is known
    assert run["round_trip"]["samples"] == 200 and 1 <= run["requests"] <= 200
    # the event loop's CPU per commit: every step of the path was called and counted, and
    # the steps are part of the loop's whole (loop_cpu.py)
    steps = {row["step"]: row for row in run["loop_cpu"]}
    for step in ("ProduceServicer._submit", "RocksStore.append", "PartitionCore.process_read",
                 "PartitionDispatcher._deliver", "Partition.publish"):
        assert steps[step]["calls_per_commit"] >= 1 and steps[step]["us_per_call"] > 0, steps
    whole = steps["**the loop in all**"]["us_per_commit"]
    assert 0 < steps["in no step"]["us_per_commit"] < whole
    # the same loop by task (task_cpu.py): the broker's tasks were timed, within the whole
    tasks = {row["task"]: row for row in run["task_cpu"]}
    for task in ("supervise:partition", "supervise:dispatcher", "ProduceServicer._pump",
                 "_handle_exceptions"):
        assert tasks[task]["steps_per_commit"] > 0 and tasks[task]["us_per_step"] > 0, tasks
    assert tasks["**the loop in all**"]["us_per_commit"] == whole
    assert sum(r["us_per_commit"] for r in run["task_cpu"][:-2]) <= whole
    assert "round trip" in stages.render({"machine": {k: "-" for k in ("date", "nproc", "cpu",
                                                                       "python")},
                                          "command": "stages", "runs": [run],
                                          "disk_fsync": {"p50_ms": 0.2, "p99_ms": 0.3}})
    assert "WAL fsyncs" in stages.render({"machine": {k: "-" for k in ("date", "nproc", "cpu",
                                                                        "python")},
                                          "command": "stages", "runs": [run],
                                          "disk_fsync": {"p50_ms": 0.2, "p99_ms": 0.3}})


def test_a_short_run_without_fsync_joins_every_event() -> None:
    """Without fsync no WAL sync follows a write: the write ends that stage."""
    options = stages.parse_args(["--duration-s", "1", "--consumers", "2",
                                 "--consumer-processes", "1", "--no-fsync", "--no-record"])
    run = stages.run_rate(200, options)
    assert run["joined"] == 200, run
    assert run["wal_fsync"]["samples"] == 0


def test_without_the_task_split_the_loop_is_still_split_by_step() -> None:
    """`--no-task-split` (for comparing with versions without task_cpu.py) leaves only
    the task table out."""
    options = stages.parse_args(["--duration-s", "1", "--consumers", "2",
                                 "--consumer-processes", "1", "--no-fsync", "--no-record",
                                 "--no-task-split"])
    run = stages.run_rate(200, options)
    assert run["joined"] == 200, run
    assert run["task_cpu"] == []
    assert any(row["step"] == "**the loop in all**" for row in run["loop_cpu"])


def test_a_round_spin_slows_every_round_by_that_much() -> None:
    """`--round-spin-us` (what a µs of the commit's path costs the latency): each round
    of the dispatcher spins first, so the round's stage takes at least that long."""
    options = stages.parse_args(["--duration-s", "1", "--consumers", "2",
                                 "--consumer-processes", "1", "--no-fsync", "--no-record",
                                 "--no-task-split", "--round-spin-us", "2000"])
    run = stages.run_rate(200, options)
    assert run["joined"] == 200, run
    rounds = next(s for s in run["stages"] if s["stage"] == "→ delivery queued")
    assert rounds["p50_ms"] >= 2.0, rounds
    assert run["task_cpu"] == []
