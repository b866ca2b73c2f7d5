"""A stored record's slot column and head read from its bytes, when the native
module was built.

Job: `log_reader.parse_record`'s choice between `_record_scan.c` and building
both from the parsed record. A dispatcher following the tail needs a record's
slot column (an int32 array) and its head (the Record's fields before the
batch, which every subset starts with); from the parsed record that is a
Python int per event into an array and a Record serialized again, about 4
microseconds a record; the C scan reads both from the bytes.

Rules: those of broker/native.py. `scan` answers None when the module is not
in use, as it does for bytes not laid out as protobuf writes them. None means:
build them from the parsed record.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from broker import native

_VERSION = 1  # SCAN_VERSION in _record_scan.c
_native = native.load("broker.subscription._record_scan", _VERSION)
NATIVE = _native is not None


def scan(body: bytes, base: int, count: int) -> tuple[bytes, npt.NDArray[np.int32]] | None:
    """The head (Record fields 1-6, `base` as base_offset) and the slot column of the
    stored record `body` of `count` events, or None: build them from the parsed record."""
    if _native is None:
        return None
    found = _native.scan(body, base, count)
    if found is None:
        return None
    head, slots = found
    return head, np.frombuffer(slots, np.int32)
