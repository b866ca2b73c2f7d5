"""The simulated log: records of events with their keys and slots, read as `scan` reads.

Each produce call makes one record (as one produce request makes one stored
record); `passing` plays the subscription's key filter (keys divisible by
`filter_mod` are dropped, when set).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(slots=True)
class SimRecord:
    """One stored record of the simulated log (what `scan` looks at)."""

    base: int
    count: int
    keys: npt.NDArray[np.int64]
    slots: npt.NDArray[np.int32]
    present: npt.NDArray[np.int64] | None = None  # every position holds an event

    @property
    def end(self) -> int:
        return self.base + self.count

    @property
    def size(self) -> int:
        return 100 * self.count


class SimLog:
    def __init__(self, filter_mod: int) -> None:
        self.filter_mod = filter_mod
        self.records: list[SimRecord] = []
        self._bases: list[int] = []
        self.end = 0

    def append(self, keys: list[int], slots: list[int]) -> None:
        self.records.append(SimRecord(self.end, len(keys), np.array(keys, np.int64),
                                      np.array(slots, np.int32)))
        self._bases.append(self.end)
        self.end += len(keys)

    def records_from(self, start: int) -> list[SimRecord]:
        i = max(0, int(np.searchsorted(self._bases, start, side="right")) - 1)
        return self.records[i:]

    def find(self, offset: int) -> SimRecord | None:
        """The record holding `offset` (as `RecordCache.find`)."""
        record = self.records_from(offset)[0] if self.records else None
        return record if record is not None and record.base <= offset < record.end else None

    def passing(self, record: SimRecord) -> npt.NDArray[np.int64] | None:
        if not self.filter_mod:
            return None
        return np.flatnonzero(record.keys % self.filter_mod != 0).astype(np.int64)
