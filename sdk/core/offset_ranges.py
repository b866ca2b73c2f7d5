"""Offset sets as half-open ranges, the form acks, nacks and cursors travel in. Pure.

Shared by the broker (cursor, ack checks) and the SDK (acks it sends), so
both sides agree on the shape: ranges ``[start, stop)`` sorted, disjoint and
never touching. Every function is a few numpy calls: no Python object per
offset or per range.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def runs_of(offsets: I64) -> tuple[I64, I64]:
    """(starts, stops) of the runs covering exactly the sorted, distinct `offsets`."""
    if not len(offsets):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    breaks = np.flatnonzero(np.diff(offsets) != 1)
    starts = np.concatenate((offsets[:1], offsets[breaks + 1]))
    stops = np.concatenate((offsets[breaks] + 1, offsets[-1:] + 1))
    return starts, stops


def merge_ranges(starts: I64, stops: I64) -> tuple[I64, I64]:
    """Sorted, disjoint, non-touching ranges covering exactly the given ones (any order,
    overlapping or touching)."""
    if not len(starts):
        return starts, stops
    order = np.argsort(starts, kind="stable")
    starts, stops = starts[order], stops[order]
    reach = np.maximum.accumulate(stops)
    new_run = np.concatenate(([True], starts[1:] > reach[:-1]))
    run_id = np.cumsum(new_run) - 1
    merged = np.zeros(int(run_id[-1]) + 1, np.int64)
    np.maximum.at(merged, run_id, stops)
    return starts[new_run], merged


def bounds_of(offsets: Iterable[int]) -> bytes:
    """The Ack/Nack `bounds` field covering exactly `offsets` (any order, repeats
    allowed): flat start0, stop0, start1, stop1, ... as little-endian int64."""
    values = np.unique(np.fromiter(offsets, np.int64))
    starts, stops = runs_of(values)
    return interleave(starts, stops)


def interleave(starts: I64, stops: I64) -> bytes:
    """`bounds` bytes of these ranges."""
    flat = np.empty(2 * len(starts), "<i8")
    flat[0::2] = starts
    flat[1::2] = stops
    return flat.tobytes()


def ranges_of_bounds(bounds: bytes) -> tuple[I64, I64]:
    """(starts, stops) of `bounds` bytes (see `bounds_of`).

    Raises:
        ValueError: not a whole number of (start, stop) pairs.
    """
    if len(bounds) % 16:
        raise ValueError(f"bounds holds {len(bounds)} bytes; it holds pairs of "
                         f"little-endian int64 (16 bytes each)")
    flat = np.frombuffer(bounds, "<i8")
    if flat.dtype != np.int64:  # a big-endian machine
        flat = flat.astype(np.int64)
    return flat[0::2], flat[1::2]
