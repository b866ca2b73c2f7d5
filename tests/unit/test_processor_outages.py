"""OutageLog: a failure that repeats every cycle is logged once per outage.

Goal: a WARNING when a kind of failure starts (with the error's message),
DEBUG while the same kind repeats (whatever its message), a WARNING naming
both kinds when it changes, one INFO when a cycle works again saying how long
it was down, how many cycles failed and the last kind; nothing while it works.
Per partition (PartitionOutages): the same, for each partition and step on its
own: a partition that fails every cycle warns once, others stay silent, two
steps failing in one attempt do not make each other a change of kind, a step
recovers only when that step works, and a partition no longer owned starts
afresh.
Method: the pure helpers fed errors and times by hand.
"""

from __future__ import annotations

import logging

from sdk import errors
from sdk.processor.outages import OutageLog, PartitionOutages

WHAT = "event processor orders/billing: balancing"
REFUSED = errors.Unauthenticated("redis ownership store redis://:***@127.0.0.1:6379/0 refused "
                                 "the credentials (invalid password)")


def test_nothing_is_said_while_it_works() -> None:
    outages = OutageLog(WHAT)
    assert outages.worked(1.0) is None and outages.worked(2.0) is None
    assert not outages.down


def test_a_repeated_failure_warns_once_then_recovers_with_a_summary() -> None:
    outages = OutageLog(WHAT)
    first = outages.failed(REFUSED, 10.0)
    assert first.level == logging.WARNING
    assert first.message.startswith(f"{WHAT} failed (Unauthenticated): {REFUSED}")
    repeats = [outages.failed(REFUSED, 10.0 + n) for n in range(1, 5)]
    assert [line.level for line in repeats] == [logging.DEBUG] * 4
    assert "Unauthenticated, 5 cycles, 4.0 s" in repeats[-1].message
    assert outages.down
    recovered = outages.worked(12.5 + 4)
    assert recovered is not None and recovered.level == logging.INFO
    assert recovered.message == (f"{WHAT} works again after 6.5 s down "
                                 "(failed 5 cycles; last: Unauthenticated)")
    assert not outages.down and outages.worked(20.0) is None


def test_the_same_kind_with_another_message_is_a_repeat() -> None:
    outages = OutageLog(WHAT)
    outages.failed(errors.Unavailable("timed out"), 0.0)
    line = outages.failed(errors.Unavailable("connection refused"), 1.0)
    assert line.level == logging.DEBUG and "connection refused" in line.message


def test_a_change_of_failure_warns_again_and_the_outage_goes_on() -> None:
    outages = OutageLog(WHAT)
    outages.failed(REFUSED, 0.0)
    outages.failed(REFUSED, 1.0)
    changed = outages.failed(errors.Unavailable("redis ownership store is unreachable"), 2.0)
    assert changed.level == logging.WARNING
    assert changed.message == (f"{WHAT} now fails differently (Unavailable; was "
                               "Unauthenticated for 2 cycles): redis ownership store is "
                               "unreachable")
    assert outages.failed(errors.Unavailable("again"), 3.0).level == logging.DEBUG
    back = outages.failed(REFUSED, 4.0)
    assert back.level == logging.WARNING and "was Unavailable for 2 cycles" in back.message
    recovered = outages.worked(5.0)
    assert recovered is not None
    assert "after 5.0 s down (failed 5 cycles; last: Unauthenticated)" in recovered.message


def test_a_new_outage_after_a_recovery_warns_again_and_counts_afresh() -> None:
    outages = OutageLog(WHAT)
    outages.failed(REFUSED, 0.0)
    outages.worked(1.0)
    again = outages.failed(REFUSED, 100.0)
    assert again.level == logging.WARNING
    recovered = outages.worked(103.0)
    assert recovered is not None and "3.0 s down (failed 1 cycle;" in recovered.message


def test_an_error_without_a_message_is_shown_by_its_repr() -> None:
    line = OutageLog(WHAT).failed(TimeoutError(), 0.0)
    assert line.message.startswith(f"{WHAT} failed (TimeoutError): TimeoutError()")


PROCESSOR = "event processor orders/billing"
BOOM = ValueError("boom at offset 7")


def test_a_partition_failing_every_cycle_warns_once_and_recovers_once() -> None:
    outages = PartitionOutages(PROCESSOR)
    lines = [outages.failed(3, "on_event", BOOM, float(n)) for n in range(5)]
    assert [line.level for line in lines] == [logging.WARNING] + [logging.DEBUG] * 4
    assert lines[0].message.startswith(
        f"{PROCESSOR} partition 3 (on_event) failed (ValueError): boom at offset 7")
    assert "(ValueError, 5 attempts, 4.0 s): boom at offset 7" in lines[-1].message
    assert outages.down(3) == ["on_event"]
    recovered = outages.worked(3, "on_event", 6.0)
    assert recovered is not None and recovered.level == logging.INFO
    assert recovered.message == (f"{PROCESSOR} partition 3 (on_event) works again after 6.0 s "
                                 "down (failed 5 attempts; last: ValueError)")
    assert outages.down(3) == [] and outages.worked(3, "on_event", 7.0) is None


def test_partitions_are_apart() -> None:
    outages = PartitionOutages(PROCESSOR)
    assert outages.failed(0, "on_event", BOOM, 0.0).level == logging.WARNING
    assert outages.failed(1, "on_event", BOOM, 0.5).level == logging.WARNING
    assert outages.failed(0, "on_event", BOOM, 1.0).level == logging.DEBUG
    assert outages.worked(2, "on_event", 1.0) is None
    line = outages.worked(1, "on_event", 2.0)
    assert line is not None and "partition 1 (on_event) works again after 1.5 s" in line.message
    assert outages.down(0) == ["on_event"] and outages.down(1) == []


def test_steps_are_apart_so_two_failures_per_attempt_stay_repeats() -> None:
    """on_event raises, then on_partition_close raises too, every cycle: two
    outages warned once each, not a "fails differently" WARNING per failure."""
    outages = PartitionOutages(PROCESSOR)
    levels = []
    for cycle in range(4):
        levels.append(outages.failed(2, "on_event", BOOM, float(cycle)).level)
        levels.append(outages.failed(2, "on_partition_close", KeyError("gone"),
                                     cycle + 0.1).level)
    assert levels == [logging.WARNING] * 2 + [logging.DEBUG] * 6
    assert outages.down(2) == ["on_event", "on_partition_close"]
    # a step recovers only when it works itself
    assert outages.worked(2, "starting", 5.0) is None
    closed = outages.worked(2, "on_partition_close", 5.0)
    assert closed is not None and "(on_partition_close) works again" in closed.message
    assert outages.down(2) == ["on_event"]


def test_a_change_of_kind_within_a_step_warns_again() -> None:
    outages = PartitionOutages(PROCESSOR)
    outages.failed(4, "starting", errors.Unavailable("checkpoint store unreachable"), 0.0)
    changed = outages.failed(4, "starting", ValueError("checkpoint file is unreadable"), 1.0)
    assert changed.level == logging.WARNING
    assert "partition 4 (starting) now fails differently (ValueError; was Unavailable for " \
           "1 attempt)" in changed.message


def test_a_partition_no_longer_owned_starts_afresh() -> None:
    outages = PartitionOutages(PROCESSOR)
    outages.failed(0, "on_event", BOOM, 0.0)
    outages.failed(1, "starting", BOOM, 0.0)
    outages.keep([1])
    assert outages.down(0) == [] and outages.down(1) == ["starting"]
    assert outages.worked(0, "on_event", 1.0) is None  # no recovery said for it here
    assert outages.failed(0, "on_event", BOOM, 2.0).level == logging.WARNING
    outages.keep(())
    assert outages.down(0) == [] and outages.down(1) == []


def test_only_the_same_claim_epoch_refused_again_is_a_stale_fence() -> None:
    outages = PartitionOutages("event processor t/g")
    assert not outages.fence_refused(3, epoch=7)  # a race: once
    assert not outages.fence_refused(3, epoch=9)  # won back under another epoch, raced again
    assert outages.fence_refused(3, epoch=9)  # the same claim refused again: stale
    assert not outages.fence_refused(4, epoch=9)  # per partition
    outages.fence_registered(3)
    assert not outages.fence_refused(3, epoch=9)  # registered since: starts afresh
    outages.keep([4])
    assert not outages.fence_refused(3, epoch=9)  # no longer owned: forgotten
    assert outages.fence_refused(4, epoch=9)
