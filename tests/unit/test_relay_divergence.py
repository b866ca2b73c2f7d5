"""The handshake's check that the upstream's log is the one copied (divergence.py)."""

from __future__ import annotations

from broker.relay.divergence import RecordMark, diverged

OURS = RecordMark(base_offset=12, scn_first=13, publish_time_ms=1_000)


def test_the_same_record_agrees() -> None:
    assert diverged(OURS, RecordMark(12, 13, 1_000)) is None


def test_another_publish_time_or_scn_at_the_offset_is_another_log() -> None:
    for theirs in (RecordMark(12, 13, 2_000), RecordMark(12, 40, 1_000)):
        reason = diverged(OURS, theirs)
        assert reason is not None and "offset 12" in reason and "published at" in reason


def test_a_record_spanning_the_offset_from_before_is_another_log() -> None:
    assert diverged(OURS, RecordMark(10, 11, 1_000)) is not None


def test_what_the_upstream_cannot_show_is_no_proof() -> None:
    assert diverged(OURS, None) is None  # removed by its retention
    assert diverged(OURS, RecordMark(15, 16, 1_000)) is None  # compaction removed the record
