"""numpy helpers for the subscription core that dodge numpy's own costs. Pure.

numpy 2's `np.unique` hashes (some 50x slower than a sort on the sorted runs
these arrays are made of), and `np.add.at` costs ~100 ns an element; on the
dispatch and ack paths both ran per round. These give the same results.
`slot_array` makes per-slot arrays whose memory costs only what is written.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import numpy.typing as npt

from sdk.core.hashing import SLOT_COUNT

_BINCOUNT_MIN = 384  # per-slot counts of at least this many events: by bincount
_PRIVATE = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)


def slot_array(dtype: type) -> npt.NDArray[Any]:
    """Zeros, one per slot, whose memory pages the process gets on their first write.

    Why not `np.zeros`: its memory comes from malloc, which (once the process has
    freed large blocks, as a broker soon has) hands back used memory and clears it
    by writing, so every page is resident at once. A dispatcher keeps a few such
    arrays (look-ahead counts, flags) of which an idle or tail-following partition
    writes a handful of entries: 2,048 of 256 KiB took 272 MB as `np.zeros` and
    1 MB as anonymous mappings. Gathers and scatters touch only their own pages;
    a scan of the whole array would map all of them (so none is done per round).
    """
    size = SLOT_COUNT * np.dtype(dtype).itemsize
    try:  # private, as malloc's own large blocks (Python's default would be shared)
        return np.frombuffer(mmap.mmap(-1, size, flags=_PRIVATE), dtype)
    except (OSError, TypeError):  # no mapping left, or no flags (not Unix): ordinary memory
        return np.zeros(SLOT_COUNT, dtype)


def distinct(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The distinct values, ascending: `np.unique` by a stable sort (which finds the
    sorted runs these arrays are made of). numpy 2's `np.unique` hashes instead, some
    50x slower on 20,000 offsets, and a cursor save sorts every unacked offset."""
    values = np.sort(values, kind="stable")
    if len(values) > 1:
        new = values[1:] != values[:-1]
        if not new.all():
            values = values[np.concatenate(([True], new))]
    return values


def slot_counts(slots: npt.NDArray[Any]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """(distinct slots ascending, how often each occurs): `np.unique(return_counts=True)`,
    by one `bincount` over the 65,536 slots once there are more than a few hundred."""
    if len(slots) < _BINCOUNT_MIN:
        values, counts = np.unique(slots, return_counts=True)
        return values.astype(np.intp), counts.astype(np.intp)
    all_counts = np.bincount(slots, minlength=SLOT_COUNT)
    values = all_counts.nonzero()[0]
    return values, all_counts[values]


def add_slot_counts(per_slot: npt.NDArray[np.int32], slots: npt.NDArray[Any], sign: int) -> None:
    """`np.add.at(per_slot, slots, sign)`: which is ~100 ns an element; a `bincount` over
    the 65,536 slots costs less once there are more than a few hundred."""
    if len(slots) < _BINCOUNT_MIN:
        np.add.at(per_slot, slots, sign)
    elif sign > 0:
        per_slot += np.bincount(slots, minlength=SLOT_COUNT).astype(np.int32)
    else:
        per_slot -= np.bincount(slots, minlength=SLOT_COUNT).astype(np.int32)
