"""Where the broker names a failed call's error, for clients to tell causes apart.

A gRPC status has a code and a message; several errors share a code (four
OUT_OF_RANGE: offsets removed by retention, past the log's end, a truncated
log, a bootstrap snapshot gone), and a message is for people: it may be
reworded. So the broker also puts the error's name from its catalogue
(broker/errors.py: "offset_before_start", "topic_not_found", ...) in the
call's trailing metadata under `ERROR_NAME_KEY`. The SDK reads it into
`KeybusError.broker_error`; any gRPC client can read it as well. A broker
that predates it sends none: clients then fall back to what they did before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

ERROR_NAME_KEY = "keybus-error"


def error_name_of(trailing_metadata: Iterable[Any] | None) -> str:
    """The error name in a call's trailing metadata ((key, value) pairs), or ""."""
    for key, value in trailing_metadata or ():
        if key == ERROR_NAME_KEY:
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""
