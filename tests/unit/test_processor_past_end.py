"""offset_reset.py: where a partition whose checkpoint is past the log's end resumes.

Goal: a checkpoint past the log's end (the broker refused the read after it
as `offset_past_end`: the log was cut after the checkpoint, or the topic made
again) is never resumed from silently: "fail" refuses with CheckpointPastEnd
(a CheckpointExpired) naming the checkpoint, the log's end, the events that
would be skipped and the ways on; "earliest" resumes at the log's start,
"latest" at its end. Only that refusal, after the checkpoint, with a
description of the log that shows the checkpoint at or past its end, counts;
a read exactly at the end is not past it. The reset's numbers and its log
line say what was passed over.
Method: the pure functions, every branch, plus a hypothesis property.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdk.errors import OffsetOutOfRange
from sdk.processor.offset_reset import (
    OFFSET_RESETS,
    CheckpointExpired,
    CheckpointPastEnd,
    CheckpointReset,
    OffsetReset,
    is_past_end,
    reset_message,
    resume_past_end,
)

WHERE = "orders/3 of group 'billing'"


def test_fail_refuses_naming_the_checkpoint_the_end_and_the_ways_on() -> None:
    with pytest.raises(CheckpointPastEnd) as caught:
        resume_past_end(WHERE, 100, 0, 10, "fail")
    assert isinstance(caught.value, CheckpointExpired)
    assert isinstance(caught.value, OffsetOutOfRange)
    assert str(caught.value) == (
        "orders/3 of group 'billing': checkpoint offset 100 is past the log's end 10 (it "
        "holds offsets 0..9): the topic was deleted and created again, the checkpoint was "
        "edited or restored, or the log was truncated after it; resuming at 101 would skip "
        "unseen the next 91 events it stores (offsets 10..100). With offset_reset='fail' the partition does not "
        "start; pass offset_reset='earliest' (resume at 0) or 'latest' (resume at the log "
        "end), or move the checkpoint")


def test_an_empty_log_is_said_as_such() -> None:
    with pytest.raises(CheckpointPastEnd, match=r"past the log's end 7 \(it is empty and its "
                                                r"next event gets offset 7\)"):
        resume_past_end(WHERE, 7, 7, 7, "fail")


def test_earliest_resumes_at_the_log_start_and_latest_at_its_end() -> None:
    assert resume_past_end(WHERE, 100, 3, 10, "earliest") == 3
    assert resume_past_end(WHERE, 100, 3, 10, "latest") == "latest"


@pytest.mark.parametrize(("broker_error", "start", "log_start", "log_end", "past"), [
    ("offset_past_end", 101, 0, 10, True),
    ("offset_past_end", 101, 0, 100, True),  # the checkpoint names the last offset + 1
    ("offset_past_end", 101, 0, 101, False),  # a description that does not show it
    ("offset_past_end", 101, None, 10, False),  # the log unknown
    ("offset_past_end", 101, 0, None, False),
    ("offset_past_end", 50, 0, 10, False),  # not the read after the checkpoint
    ("offset_past_end", "latest", 0, 10, False),
    ("offset_before_start", 101, 0, 10, False),  # retention's: resume_at decides it
    (None, 101, 0, 10, False),
])
def test_only_the_refusal_after_the_checkpoint_with_the_log_showing_it_counts(
        broker_error: str | None, start: object, log_start: int | None, log_end: int | None,
        past: bool) -> None:
    assert is_past_end(broker_error, start, 100, log_start, log_end) is past


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6),
       st.sampled_from(OFFSET_RESETS))
def test_past_the_end_never_resumes_after_the_checkpoint(
        checkpoint: int, log_start: int, log_end: int, policy: OffsetReset) -> None:
    log_start = min(log_start, log_end)
    # the read that starts exactly at the end (checkpoint = end - 1) is never past it
    assert is_past_end("offset_past_end", checkpoint + 1, checkpoint, log_start,
                       log_end) is (checkpoint >= log_end)
    if checkpoint < log_end:
        return
    try:
        resumed = resume_past_end(WHERE, checkpoint, log_start, log_end, policy)
    except CheckpointPastEnd:
        assert policy == "fail"
        return
    assert resumed == (log_start if policy == "earliest" else "latest")


def test_a_reset_past_the_end_counts_the_stored_events_it_passes_over() -> None:
    earliest = CheckpointReset("earliest", 100, 0, 0, 10)
    assert (earliest.past_end, earliest.removed, earliest.skipped) == (True, 0, 0)
    assert reset_message("event processor orders/billing partition 3", earliest) == (
        "event processor orders/billing partition 3: checkpoint offset 100 is past the log's "
        "end 10 (it holds offsets 0..9; the topic made again, or the log cut after the "
        "checkpoint); offset_reset='earliest': resuming at offset 0, skipping 0 events "
        "still stored")
    latest = CheckpointReset("latest", 100, 2, 10, 10)
    assert (latest.past_end, latest.removed, latest.skipped) == (True, 0, 8)
    assert reset_message("p", latest).endswith(
        "offset_reset='latest': resuming at offset 10, skipping 8 events still stored")
    assert not CheckpointReset("earliest", 4, 10, 10).past_end  # retention's, as before
