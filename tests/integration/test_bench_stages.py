"""Goal: `python -m benchmarks stages` still joins every event of a short real run (it
wraps private methods of the broker and the SDK; a rename must fail here, not silently
in a long benchmark).

Method: the real traced broker, producer and 2 Key_Shared consumer processes at 200
events/s for 1 s; every event is joined and its stages add up to its latency.
"""

from __future__ import annotations

from benchmarks import stages


def test_a_short_run_joins_every_event() -> None:
    options = stages.parse_args(["--duration-s", "1", "--consumers", "2", "--no-record"])
    run = stages.run_rate(200, options)
    assert run["events"] == 200
    assert run["joined"] == 200, run
    assert all(stage["samples"] == 200 for stage in run["stages"])
    assert run["total"]["samples"] == 200
    assert run["cpu_cores"]["broker"] > 0
