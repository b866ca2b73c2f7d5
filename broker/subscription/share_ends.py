"""Where a consumer's share of a window ends: `Delivery.open_windows`.

Job: a Key_Shared consumer gets only its share of each window (one stored
record), maybe over several sends. A Databus consumer must present that share
whole, and without being told it could only guess the end (its linger: wait
until nothing came for a while, which costs the linger on every share and can
split a share when the broker stalls longer). The broker knows: more of a
window comes to a consumer after a send only when

1. events of the window that the consumer's ranges own were not sent yet
   (`PartitionCore.holds_unsent`: not read, waiting for permits or a
   draining key, behind a floor), or
2. a later send of the same batch, to the same consumer, carries more of it.

For each send this gives the last offsets of those of its windows (the
delivery marks them open; delivery.py also keeps a part split over several
messages open in all but its last). Following the tail nothing waits and
each consumer gets one send a round, so nothing is computed beyond a check
per send (`may_hold_unsent`).

It must not know about gRPC, the event loop or RocksDB.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from broker.subscription.core import PartitionCore, Send
from broker.subscription.holdings import I64
from broker.subscription.log_reader import ScanRecord

NONE: frozenset[int] = frozenset()


class WindowRecord(ScanRecord, Protocol):
    """A stored record as this looks at it (a `CachedRecord`, or a simulation's)."""

    @property
    def present(self) -> npt.NDArray[np.int64] | None: ...


class RecordIndex(Protocol):
    """Where the records of sends are found (the dispatcher's `RecordCache`)."""

    def find(self, offset: int) -> WindowRecord | None: ...


def open_windows(core: PartitionCore, cache: RecordIndex, sends: Sequence[Send],
                 held: Sequence[WindowRecord | None] | None = None) -> list[frozenset[int]]:
    """Per send, in the order they go out: the windows (last offsets) of its records of
    which more follows for its consumer. `held`: each send's one cached record, when
    the caller looked it up already (None where a send spans records)."""
    n = len(sends)
    if not core.keyed or not n:  # Shared has no per-key order: no windows to frame
        return [NONE] * n
    lasts = held if held is not None else \
        [cache.find(int(send.events.offsets[-1])) for send in sends]
    stop = max([r.base + r.count for r in lasts if r is not None], default=0)
    if len({send.consumer for send in sends}) == n and not core.may_hold_unsent(stop):
        return [NONE] * n  # following the tail: one check for the round
    result = []
    for i, send in enumerate(sends):
        offsets = send.events.offsets
        entry = held[i] if held is not None else None
        later = [s.events.offsets for s in sends[i + 1:] if s.consumer == send.consumer]
        records = [entry] if entry is not None else _records_of(cache, offsets)
        result.append(frozenset(record.end - 1 for record in records
                                if _continues(core, send.consumer, record, later)))
    return result


def _continues(core: PartitionCore, consumer: str, record: WindowRecord,
               later: list[I64]) -> bool:
    for offsets in later:
        if np.count_nonzero((offsets >= record.base) & (offsets < record.end)):
            return True
    if not core.may_hold_unsent(record.end):
        return False
    positions = record.present if record.present is not None else \
        np.arange(record.count, dtype=np.int64)
    return core.holds_unsent(consumer, positions + record.base, record.slots[positions])


def _records_of(cache: RecordIndex, offsets: I64) -> list[WindowRecord]:
    """The cached records holding `offsets` (ascending); offsets of none are skipped."""
    records: list[WindowRecord] = []
    i, n = 0, len(offsets)
    while i < n:
        entry = cache.find(int(offsets[i]))
        if entry is None:
            i += 1
            continue
        records.append(entry)
        i = int(offsets.searchsorted(entry.end))
    return records
