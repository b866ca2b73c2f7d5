"""Where a streaming snapshot read goes on when retention removed the log it stood on.

Goal: `past_retention` never hands out again what the read had handed out (the
snapshot resumes after the last key, the log after the last offset) and skips
no more than the removed log: the snapshot's offset or the log's next offset
moves up to the log's start, never down, so a read that is already past it
goes on where it stood; `reads_log` says whether anything of the log is left
before the split's stop. Method: the pure functions on positions. The same
with a real broker and real Spark: tests/e2e/test_spark_snapshot_retention.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from sdk.bootstrap import CATCHUP, ONLINE, SNAPSHOT, BootstrapPosition
from spark_connector.snapshot import past_retention, reads_log


def test_in_the_snapshot_it_resumes_after_the_last_key_as_of_the_log_start() -> None:
    stood = BootstrapPosition(SNAPSHOT, 60, "orders", 41)
    assert past_retention(stood, 100) == BootstrapPosition(SNAPSHOT, 100, "orders", 41)
    nothing_yet = BootstrapPosition(SNAPSHOT, 60)
    assert past_retention(nothing_yet, 100) == BootstrapPosition(SNAPSHOT, 100)
    assert past_retention(stood, 40) == stood  # the start has not moved past it yet


@pytest.mark.parametrize("phase", [CATCHUP, ONLINE])
def test_in_the_log_it_goes_on_at_the_log_start(phase: str) -> None:
    stood = BootstrapPosition(phase, 60, next_offset=90, target_offset=95)
    moved = past_retention(stood, 100)
    assert (moved.phase, moved.snapshot_offset, moved.next_offset, moved.target_offset) == (
        phase, 60, 100, 100)  # the catch-up's target is never below where it reads
    assert past_retention(stood, 80) == stood
    assert past_retention(BootstrapPosition(phase, 60, next_offset=90, target_offset=150),
                          100).target_offset == 150


def test_reads_log_only_below_the_stop() -> None:
    assert reads_log(BootstrapPosition(SNAPSHOT, 60), 110)
    assert not reads_log(BootstrapPosition(SNAPSHOT, 110), 110)
    assert not reads_log(BootstrapPosition(SNAPSHOT, 120), 110)  # the log to the stop is gone
    assert reads_log(BootstrapPosition(CATCHUP, 60, next_offset=100, target_offset=100), 110)
    assert not reads_log(BootstrapPosition(CATCHUP, 60, next_offset=110), 110)
    assert not reads_log(BootstrapPosition(SNAPSHOT, 60), None)
