"""Callback results: what a Databus callback tells the client, and how two merge.

Databus's `ConsumerCallbackResult` levels, kept as numbers so that the more
severe of two results is simply the larger (`merge`). Rules:

1. SUCCESS < CHECKPOINT < SKIP_CHECKPOINT < ERROR < FATAL.
2. CHECKPOINT ("ready for a checkpoint") forces a checkpoint at the end of
   the window; SKIP_CHECKPOINT (the consumer has not saved its work) vetoes
   one. Both are successes.
3. ERROR rolls the current window back and delivers it again; FATAL stops
   consumption at once.
4. What a Python callback may return: a `CallbackResult`, None or True
   (SUCCESS), False (ERROR, as Databus's "a listener returns false"). Any
   other value is a programming error in the consumer and counts as ERROR.

It must not know about windows, members or I/O.
"""

from __future__ import annotations

from enum import IntEnum


class CallbackResult(IntEnum):
    """The result of one callback (Databus `ConsumerCallbackResult`)."""

    SUCCESS = 0
    CHECKPOINT = 100
    SKIP_CHECKPOINT = 150
    ERROR = 200
    FATAL = 300

    @property
    def is_failure(self) -> bool:
        return self >= CallbackResult.ERROR


SUCCESS = CallbackResult.SUCCESS
CHECKPOINT = CallbackResult.CHECKPOINT
SKIP_CHECKPOINT = CallbackResult.SKIP_CHECKPOINT
ERROR = CallbackResult.ERROR
FATAL = CallbackResult.FATAL


def merge(first: CallbackResult, second: CallbackResult) -> CallbackResult:
    """The more severe of two results (Databus `ConsumerCallbackResult.max`)."""
    return first if first >= second else second


def normalize(returned: object) -> CallbackResult | None:
    """A callback's return value as a result; None when it is not an allowed one
    (the caller counts that as ERROR and says what was returned)."""
    if returned is None or returned is True:
        return SUCCESS
    if returned is False:
        return ERROR
    if isinstance(returned, CallbackResult):
        return returned
    return None
