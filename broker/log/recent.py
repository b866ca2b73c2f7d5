"""A partition's most recent durable records, kept in memory for its dispatchers.

Why: a dispatcher that follows the tail would otherwise read each record it
was just woken for back from RocksDB on a worker thread, a thread hop on
every delivery, which on a loaded machine is a large part of what is left of
publish-to-delivery after the fsync. The partition task adds every record it
commits here once the WriteBatch is durable (the same bytes it wrote), and a
dispatcher whose read starts inside the window takes the records from memory
on the event loop, in the turn it is woken.

Rules:
1. Contiguous: each record starts where the previous one ended; a record that
   does not (or one larger than the whole window) empties the window first.
2. Bounded by `bytes_max` and `records_max`: the oldest records go first.
3. Whatever else writes or removes records of the partition (relay appends and
   truncations, retention, compaction) empties the window (`clear`), so what
   it holds is always what the log holds from its first offset on.

Pure: no asyncio, no I/O, no clock.
"""

from __future__ import annotations

from collections import deque


class RecentRecords:
    """The last committed records of one partition, as stored: (base offset, value)."""

    __slots__ = ("_bytes", "_ends", "_records", "bytes_max", "records_max")

    def __init__(self, bytes_max: int, records_max: int) -> None:
        assert bytes_max >= 0 and records_max >= 0
        self.bytes_max = bytes_max
        self.records_max = records_max
        self._records: deque[tuple[int, bytes]] = deque()
        self._ends: deque[int] = deque()  # end offset of each record (base + count)
        self._bytes = 0

    @property
    def start(self) -> int | None:
        """The first offset held (None: empty)."""
        return self._records[0][0] if self._records else None

    @property
    def end(self) -> int | None:
        """One past the last offset held (None: empty)."""
        return self._ends[-1] if self._ends else None

    def __len__(self) -> int:
        return len(self._records)

    def add(self, base: int, count: int, value: bytes) -> None:
        """Keep a record just made durable (rule 1 and 2)."""
        assert count >= 1
        if (self._ends and self._ends[-1] != base) or len(value) > self.bytes_max \
                or not self.records_max:
            self.clear()
            if len(value) > self.bytes_max or not self.records_max:
                return
        self._records.append((base, value))
        self._ends.append(base + count)
        self._bytes += len(value)
        while self._bytes > self.bytes_max or len(self._records) > self.records_max:
            self._bytes -= len(self._records.popleft()[1])
            self._ends.popleft()

    def clear(self) -> None:
        self._records.clear()
        self._ends.clear()
        self._bytes = 0

    def covering(self, start: int, stop: int) -> list[tuple[int, bytes]] | None:
        """`from_offset(start)`, only when the window also reaches `stop`: a read
        over it then sees every record of [start, stop), as a read of the log would
        (None otherwise: read the log)."""
        if not self._ends or self._ends[-1] < stop:
            return None
        return self.from_offset(start)

    def from_offset(self, offset: int) -> list[tuple[int, bytes]] | None:
        """The records from the one holding `offset` to the newest, or None when
        the window does not hold `offset` (read the log instead)."""
        records = self._records
        if not records or not records[0][0] <= offset < self._ends[-1]:
            return None
        ends = self._ends
        i = len(ends) - 1
        while i > 0 and ends[i - 1] > offset:  # the tail reader is near the end: walk back
            i -= 1
        return [records[j] for j in range(i, len(records))]
