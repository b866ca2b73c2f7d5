"""OutageLog: a failure that repeats every cycle is logged once per outage.

Goal: a WARNING when a kind of failure starts (with the error's message),
DEBUG while the same kind repeats (whatever its message), a WARNING naming
both kinds when it changes, one INFO when a cycle works again saying how long
it was down, how many cycles failed and the last kind; nothing while it works.
Method: the pure helper fed errors and times by hand.
"""

from __future__ import annotations

import logging

from sdk import errors
from sdk.processor.outages import OutageLog

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
