"""`slots_taken`: which refusals a bootstrap waits out (the broker's slots all in
use) and which end it. Goal: decided by the error's name from the broker's
catalogue, not by its wording, which is for people; the wording only for a
broker that sends no names. Method: errors built as the SDK maps them."""

from __future__ import annotations

from sdk import errors
from sdk.slot_wait import slots_taken

SAID = ("the broker serves 64 Bootstrap streams in their snapshot or catch-up at once "
        "(bootstrap_streams_max); retry later")


def named(error: errors.KeybusError, name: str) -> errors.KeybusError:
    error.broker_error = name
    return error


def test_the_name_decides() -> None:
    assert slots_taken(named(errors.ResourceExhausted("reworded, any text"),
                             "too_many_bootstraps"))
    assert not slots_taken(named(errors.ResourceExhausted(SAID), "another_limit"))


def test_without_a_name_the_wording_decides() -> None:
    assert slots_taken(errors.ResourceExhausted(SAID))
    assert not slots_taken(errors.ResourceExhausted("the broker's memory is full"))


def test_other_codes_never_wait() -> None:
    assert not slots_taken(named(errors.KeybusError(SAID, errors.UNAVAILABLE),
                                 "too_many_bootstraps"))
