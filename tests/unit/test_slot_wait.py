"""`SlotWait`: a bootstrap's wait for a free slot of a busy broker, as a pure core.

Goal: the wait is said once when it begins (naming the partition, the broker
and the broker's words, which give its limit) and once when a stream is
accepted; it asks again with a capped doubling pause; it ends with
ResourceExhausted (the broker's error name kept) once `timeout_ms` passes,
and never while it is 0. Method: the core with made-up clock values.
"""

from __future__ import annotations

import pytest

from sdk import errors
from sdk.slot_wait import SlotWait, SlotWaitPolicy

SAID = ("the broker serves 1 Bootstrap streams in their snapshot or catch-up at once "
        "(bootstrap_streams_max); retry later")


def refusal() -> errors.KeybusError:
    error = errors.ResourceExhausted(SAID)
    error.broker_error = "too_many_bootstraps"
    return error


def test_the_wait_is_said_once_and_its_end_once() -> None:
    wait = SlotWait("orders/3", "127.0.0.1:7", SlotWaitPolicy(0, 100, 1_000))
    pause, note = wait.process_refused(refusal(), 10_000)
    assert pause == 100 and note is not None
    assert note.startswith("orders/3 waits for a bootstrap slot of the broker at 127.0.0.1:7 "
                           "(asking again every 1 s at most, until one is free)")
    assert note.endswith(SAID)
    pauses = [wait.process_refused(refusal(), 10_000 + i) for i in range(1, 6)]
    assert pauses == [(200, None), (400, None), (800, None), (1_000, None), (1_000, None)]
    assert wait.waiting
    assert wait.process_accepted(12_500) == \
        "orders/3 got a bootstrap slot of the broker at 127.0.0.1:7 after 2.5 s"
    assert not wait.waiting
    assert wait.process_accepted(13_000) is None  # no wait: nothing to say
    pause, note = wait.process_refused(refusal(), 20_000)  # a new wait: said again
    assert pause == 100 and note is not None and "waits for a bootstrap slot" in note


def test_a_bounded_wait_fails_with_the_brokers_error_past_its_bound() -> None:
    wait = SlotWait("orders/0", "127.0.0.1:7", SlotWaitPolicy(1_000, 100, 400))
    _, note = wait.process_refused(refusal(), 0)
    assert note is not None and "for up to 1 s" in note
    assert wait.process_refused(refusal(), 500) == (200, None)
    with pytest.raises(errors.ResourceExhausted,
                       match=r"orders/0 waited 0.9 s for a bootstrap slot of the broker at "
                             r"127.0.0.1:7, and slot_wait_timeout_ms=1000 ran out: the broker "
                             r"serves 1") as caught:
        wait.process_refused(refusal(), 900)  # 900 + the next pause (400) > 1000
    assert caught.value.broker_error == "too_many_bootstraps"


def test_an_unbounded_wait_never_fails() -> None:
    wait = SlotWait("orders/0", "127.0.0.1:7", SlotWaitPolicy(0, 1, 2))
    for hour in range(48):
        wait.process_refused(refusal(), hour * 3_600_000)
    assert wait.waiting


@pytest.mark.parametrize(("args", "text"), [
    ((-1, 100, 1_000), "slot_wait_timeout_ms=-1 is invalid: need an int >= 0"),
    ((0, 0, 1_000), "backoff_first_ms=0 is invalid"),
    ((0, 100, 1.5), "backoff_max_ms=1.5 is invalid"),
])
def test_bad_settings_say_what_is_allowed(args: tuple[int, int, int], text: str) -> None:
    with pytest.raises(ValueError, match=text):
        SlotWaitPolicy(*args)
