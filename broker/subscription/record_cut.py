"""Subsets of stored records cut in C, when the native module was built.

Job: the delivery path's choice between `_record_cut.c` and the Python paths
(`CachedRecord.proto_subset_bytes`, `subset_wire`). The C cut costs about a
microsecond a subset against 10-30 for the Python paths in the broker, where
it runs a few times for every commit a Key_Shared subscription follows.

Rules: those of broker/native.py. `cut` and `delivery` answer None when the
module is not in use, as they do for bytes the C walk does not expect. None
means: cut it in Python.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from broker import native

_VERSION = 2  # CUT_VERSION in _record_cut.c
_native = native.load("broker.subscription._record_cut", _VERSION)
NATIVE = _native is not None


def _int64(positions: Sequence[int] | npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Positions as the C code reads them (a contiguous int64 array: as is, no copy)."""
    return np.ascontiguousarray(positions, np.int64)


def cut(body: bytes, head: bytes, base: int, count: int,
        positions: Sequence[int] | npt.NDArray[np.int64]) -> bytes | None:
    """The subset Record of the events at `positions` of the stored record `body`
    (`count` events from offset `base`; `head` its Record fields 1-6), or None:
    cut it in Python."""
    if _native is None:
        return None
    result: bytes | None = _native.cut(body, head, base, count, _int64(positions))
    return result


def delivery(body: bytes, head: bytes, base: int, count: int,
             positions: npt.NDArray[np.int64], last: int, nacks_seen: int, send: int,
             bytes_max: int) -> bytes | bool | None:
    """That subset framed as one Delivery (`delivery._one_part`: the record part, its
    window's last offset `last`, `nacks_seen`, `send`); False when the subset is
    larger than `bytes_max` (the caller splits it); None as for `cut`."""
    if _native is None:
        return None
    result: bytes | bool | None = _native.delivery(
        body, head, base, count, _int64(positions), last, nacks_seen, send, bytes_max)
    return result
