"""numpy helpers for the subscription core that dodge numpy's own costs. Pure.

numpy 2's `np.unique` hashes (some 50x slower than a sort on the sorted runs
these arrays are made of), and `np.add.at` costs ~100 ns an element; on the
dispatch and ack paths both ran per round. These give the same results.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from sdk.core.hashing import SLOT_COUNT

_BINCOUNT_MIN = 384  # per-slot counts of at least this many events: by bincount


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
