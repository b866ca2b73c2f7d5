"""What a partition's view entries hold, remembered between passes. Pure.

A pass counts the view's keys, tombstones and bytes from the entries its
puts replace (`fold.account`): for each key, absent, or the old entry's
length and whether it was a tombstone. Reading the old entries back is a
multi-get: at 10,000 events/s (6,300 keys a pass) about a third of a
pass's CPU, on 2 cores the event loop shares (rocksdict lets the GIL go
during it, so the cost is the CPU, not a wait for the GIL). A key's size is
all the count needs, so the store keeps each partition's sizes from the
passes it wrote and reads only the keys it does not know.

Rules:
1. A size is `len(entry) + (is_tombstone << 48)` (one int per key), so a
   plain `sum` of sizes, a tight C loop, gives bytes and tombstones at once
   (`split_sum`; bytes up to 2**48 a pass).
2. A partition's sizes are trusted only while the view's stored state is
   the one they were left with (`remember`): every other writer of entries
   (a sweep that deletes, a clear, a deleted topic's range delete, a pass
   cut by an error or a crash) writes another state, or removes it, so the
   next `lookup` drops them and starts over.
3. Keys only join (each remembered key was just put); entries leave only
   through those other writers. So when a partition knows as many sizes as
   its state counts keys, it knows every key, and a key it does not know is
   absent: nothing is read.
4. At most `capacity` sizes over all partitions: a partition that would go
   past it forgets what it knew first (rule 3 then reads again).
5. Work over a pass's keys runs in slices of `slice_size` with `pause()`
   between two: a builtin's C loop keeps the GIL to its end, whatever the
   switch interval, and 6,300 keys at once kept the event loop waiting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import repeat
from operator import add, itemgetter

from broker.config import Settings
from broker.view import codec
from sdk.core.pb import keybus_pb2 as pb

CAPACITY = Settings().view_sizes_remembered_max  # the setting's default

TOMBSTONE_SHIFT = 48
_opcode = itemgetter(codec.OPCODE_AT)
_tombstone_bit = {pb.DELETE: 1 << TOMBSTONE_SHIFT}.get


def sizes_of(entries: Sequence[bytes]) -> list[int]:
    """Rule 1 for each entry value, in C loops (no Python code per entry)."""
    return list(map(add, map(len, entries), map(_tombstone_bit, map(_opcode, entries), repeat(0))))


def split_sum(sizes: Iterable[int]) -> tuple[int, int]:
    """(bytes, tombstones) of entries of these sizes."""
    total = sum(sizes)
    return total & ((1 << TOMBSTONE_SHIFT) - 1), total >> TOMBSTONE_SHIFT


def slice_starts(count: int, size: int, pause: Callable[[], None]) -> Iterator[int]:
    """Each slice's first index over `count` items, pausing before every slice but the
    first (rule 5; the store's reads slice the same way)."""
    for start in range(0, count, size):
        if start:
            pause()
        yield start


class EntrySizes:
    """The sizes of the entries each partition's view holds, as far as known."""

    def __init__(self, capacity: int = CAPACITY, slice_size: int = 256,
                 pause: Callable[[], None] = lambda: None) -> None:
        self.capacity = capacity
        self.slice = slice_size
        self.pause = pause
        self._partitions: dict[tuple[int, int], tuple[codec.ViewState, dict[bytes, int]]] = {}

    def lookup(self, topic_id: int, partition: int, state: codec.ViewState, keys: list[bytes],
               read: Callable[[list[bytes]], list[bytes | None]]) -> list[int | None]:
        """The size of each key's entry now (None: absent), given the view's stored
        `state`; `read` gets the values of the keys not known (rules 2-3)."""
        held = self._partitions.get((topic_id, partition))
        if held is None or held[0] != state:
            self._partitions.pop((topic_id, partition), None)
            known: dict[bytes, int] = {}
        else:
            known = held[1]
        found: list[int | None] = []
        for start in slice_starts(len(keys), self.slice, self.pause):
            found += map(known.get, keys[start:start + self.slice])
        if len(known) == state.keys:
            return found
        unknown = [i for i, size in enumerate(found) if size is None]
        values = read([keys[i] for i in unknown])
        present = [(i, v) for i, v in zip(unknown, values, strict=True) if v is not None]
        for (i, _), size in zip(present, self.sizes_of([v for _, v in present]), strict=True):
            found[i] = size
        return found

    def sizes_of(self, entries: Sequence[bytes]) -> list[int]:
        """`sizes_of`, in slices (rule 5)."""
        sizes: list[int] = []
        for start in slice_starts(len(entries), self.slice, self.pause):
            sizes += sizes_of(entries[start:start + self.slice])
        return sizes

    def remember(self, topic_id: int, partition: int, after: codec.ViewState,
                 keys: Sequence[bytes], sizes: Sequence[int]) -> None:
        """A pass wrote `keys` with these sizes and left the state `after`; its
        `lookup` just now kept what was known only if it still held (rule 2)."""
        held = self._partitions.pop((topic_id, partition), None)
        known = held[1] if held is not None else {}
        others = sum(len(k) for _, k in list(self._partitions.values()))  # other threads' passes
        if others + len(known) + len(keys) > self.capacity:
            known = {}  # rule 4
            if others + len(keys) > self.capacity:
                return
        for start in slice_starts(len(keys), self.slice, self.pause):
            known.update(zip(keys[start:start + self.slice], sizes[start:start + self.slice],
                             strict=True))
        self._partitions[topic_id, partition] = (after, known)
