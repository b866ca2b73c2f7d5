"""offset_reset.py: where a partition whose checkpoint is behind the log's start resumes.

Goal: a checkpoint retention has passed (checkpoint + 1 < the log's start) is
never resumed from silently: "fail" refuses with CheckpointExpired naming the
offsets and the ways on, "earliest" resumes at the log's start, "latest" at
the log end (the reader fixes it); a checkpoint at or past the start, or a
log start that is unknown, resumes after the checkpoint whatever the policy.
The reset's numbers (removed by retention, skipped in all) and its one log
line say what was lost.
Method: the pure functions, every branch, plus a hypothesis property over
checkpoint, log start and policy.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdk.errors import OffsetOutOfRange
from sdk.processor.offset_reset import (
    OFFSET_RESETS,
    CheckpointExpired,
    CheckpointReset,
    OffsetReset,
    check_offset_reset,
    reset_message,
    resume_at,
)

WHERE = "orders/3 of group 'billing'"


@pytest.mark.parametrize("policy", OFFSET_RESETS)
@pytest.mark.parametrize(("checkpoint", "log_start"), [(9, 10), (9, 5), (9, None), (0, 0)])
def test_a_checkpoint_not_behind_the_start_resumes_after_it(
        policy: OffsetReset, checkpoint: int, log_start: int | None) -> None:
    assert resume_at(WHERE, checkpoint, log_start, policy) == checkpoint + 1


def test_fail_refuses_an_expired_checkpoint_naming_the_offsets_and_the_ways_on() -> None:
    with pytest.raises(CheckpointExpired) as caught:
        resume_at(WHERE, 4, 10, "fail")
    assert isinstance(caught.value, OffsetOutOfRange)  # on_error code that catches it still does
    assert str(caught.value) == (
        "orders/3 of group 'billing': checkpoint offset 4 is behind the log's start 10: "
        "retention removed offsets 5..9 (5 events this group never processed). With "
        "offset_reset='fail' the partition does not start, so nothing is skipped unseen; "
        "pass offset_reset='earliest' (resume at 10) or 'latest' (resume at the log end), "
        "or move the checkpoint")


def test_earliest_resumes_at_the_log_start_and_latest_at_its_end() -> None:
    assert resume_at(WHERE, 4, 10, "earliest") == 10
    assert resume_at(WHERE, 4, 10, "latest") == "latest"


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.sampled_from(OFFSET_RESETS))
def test_never_resumes_before_the_log_start_nor_skips_a_stored_event_unasked(
        checkpoint: int, log_start: int, policy: OffsetReset) -> None:
    expired = checkpoint + 1 < log_start
    try:
        resumed = resume_at(WHERE, checkpoint, log_start, policy)
    except CheckpointExpired:
        assert expired and policy == "fail"
        return
    if not expired:
        assert resumed == checkpoint + 1
    elif policy == "earliest":
        assert resumed == log_start  # every stored event is still processed
    else:
        assert policy == "latest" and resumed == "latest"


def test_a_reset_counts_what_retention_removed_and_what_it_passes_over() -> None:
    earliest = CheckpointReset("earliest", 4, 10, 10)
    assert (earliest.removed, earliest.skipped) == (5, 5)
    assert reset_message("event processor orders/billing partition 3", earliest) == (
        "event processor orders/billing partition 3: checkpoint offset 4 is behind the log's "
        "start 10 (retention removed offsets 5..9); offset_reset='earliest': resuming at "
        "offset 10, skipping 5 events (5 removed by retention)")
    latest = CheckpointReset("latest", 4, 10, 30)
    assert (latest.removed, latest.skipped) == (5, 25)
    assert reset_message("p", latest).endswith(
        "offset_reset='latest': resuming at offset 30, skipping 25 events (5 removed by "
        "retention, 20 still stored passed over)")


@pytest.mark.parametrize("value", OFFSET_RESETS)
def test_each_allowed_value_is_taken(value: str) -> None:
    check_offset_reset(value)


@pytest.mark.parametrize("value", ["none", "Earliest", "", None, 0, ["earliest"]])
def test_anything_else_is_refused_naming_what_is_allowed(value: object) -> None:
    with pytest.raises(ValueError, match=r"offset_reset=.* is invalid; allowed: 'fail', "
                                         r"'earliest', 'latest'"):
        check_offset_reset(value)
