"""Build the cursor to persist from a core's state. Pure, vectorized.

Job: turn what is unacknowledged now (events in flight, floors) and, after a
restart, what the loaded cursor still says about offsets not read again yet,
into one `Cursor`, within the named limit on its runs.

Rules:
1. Runs come from the distinct unacknowledged offsets; touching runs merge.
2. While a restart's cursor still covers offsets at or past the main read
   (`position`), its runs and floors there are kept (floors raised to
   `position`: below it the live state knows better). The union may claim
   more unacknowledged than there is, never less: after another crash that
   means a redelivery, never a loss.
3. Past `runs_max` runs, the horizon moves down to the first run left out:
   everything from there counts as unacknowledged (after a crash those
   acknowledged events come again, as with Pulsar's
   managedLedgerMaxUnackedRangesToPersist); floors at or past it go too.
"""

from __future__ import annotations

import numpy as np

from broker.subscription.cursor import Cursor, Int64Array, merge_ranges, runs_of


def merge_cursor(mark_delete: int, position: int, unacked: Int64Array, floor_slots: Int64Array,
                 floor_offsets: Int64Array, restart: Cursor | None, runs_max: int) -> Cursor:
    """See the module docstring; `unacked` is sorted and distinct, all below `position`."""
    starts, stops = runs_of(unacked)
    horizon = position
    if restart is not None and restart.horizon > position:
        keep = restart.run_stops > position
        starts, stops = merge_ranges(
            np.concatenate((starts, np.maximum(restart.run_starts[keep], position))),
            np.concatenate((stops, restart.run_stops[keep])))
        floor_slots, floor_offsets = _min_floors(
            floor_slots, floor_offsets, restart.floor_slots,
            np.maximum(restart.floor_offsets, position))
        horizon = restart.horizon
    if len(starts) > runs_max:
        horizon = int(starts[runs_max])
        starts, stops = starts[:runs_max], stops[:runs_max]
        kept = floor_offsets < horizon
        floor_slots, floor_offsets = floor_slots[kept], floor_offsets[kept]
    mark = min(mark_delete, horizon)
    return Cursor(mark, horizon, starts.astype(np.int64), stops.astype(np.int64),
                  floor_slots.astype(np.int64), floor_offsets.astype(np.int64))


def _min_floors(slots_a: Int64Array, offsets_a: Int64Array, slots_b: Int64Array,
                offsets_b: Int64Array) -> tuple[Int64Array, Int64Array]:
    """Per slot the lowest floor of either set, slots ascending."""
    slots = np.concatenate((slots_a, slots_b))
    offsets = np.concatenate((offsets_a, offsets_b))
    if not len(slots):
        return slots, offsets
    order = np.lexsort((offsets, slots))
    slots, offsets = slots[order], offsets[order]
    first = np.concatenate(([True], slots[1:] != slots[:-1]))
    return slots[first], offsets[first]
