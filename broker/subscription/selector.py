"""The Key_Shared selector protocol, and the owner map every mode shares.

Job: say which consumer of a Key_Shared subscription owns each of the 65,536
hash slots, and report what moved when a consumer joins or leaves (as
Pulsar's selectors report impacted ranges), so that the dispatcher can keep
per-key order across the change (see `dispatch.DrainTracker`).

Rules:
1. One class per mode (`AutoSplitSelector`, `StickySelector`,
   `ConsistentHashSelector`) behind the one `KeySharedSelector` protocol.
2. A selector keeps its map as *segments*: sorted, disjoint, coalesced
   ``(slot_first, slot_last, consumer)`` triples with inclusive ends. A slot
   inside no segment has no owner. Everything else (`owner_of`, `ranges_of`,
   the 65,536-entry `OwnerTable`, `RangeChanges`) is derived from segments
   by the helpers here, so all modes answer the same way.
3. Consumers are identified by name; a name is unique within a selector.
4. Errors about what a client asked for are `SelectorError` (a ValueError):
   the shell answers the client with them.

It must not know about: events, offsets, permits, acks, time beyond the
`now_ms` it is handed, gRPC or storage. It sends nothing.
"""

from __future__ import annotations

import weakref
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sdk.core.hashing import SLOT_COUNT
from sdk.core.model import HashRange

Segment = tuple[int, int, str]
"""(slot_first, slot_last, consumer): an inclusive run of slots with one owner."""

NO_OWNER = 0
"""The `OwnerTable.indexes` entry of a slot that no consumer owns."""


class SelectorError(ValueError):
    """A consumer change the selector refuses; the message says why and what is allowed."""


class DuplicateConsumer(SelectorError):
    """A consumer name that is already attached to this selector."""


class UnknownConsumer(SelectorError):
    """A consumer name that is not attached to this selector."""


class SelectorFull(SelectorError):
    """No hash range is left to give a new consumer."""


@dataclass(frozen=True, slots=True)
class RangeMove:
    """Slots `hash_range` passed from `from_consumer` to `to_consumer` (None: nobody)."""

    hash_range: HashRange
    from_consumer: str | None
    to_consumer: str | None


@dataclass(frozen=True, slots=True)
class RangeChanges:
    """What one join or leave changed.

    Attributes:
        consumers: consumer -> (old ranges, new ranges), only for consumers
            whose ranges changed (a joining consumer has old ``()``, a
            leaving one new ``()``).
        moves: the moved slot runs in slot order, coalesced per (from, to).
    """

    consumers: Mapping[str, tuple[tuple[HashRange, ...], tuple[HashRange, ...]]]
    moves: tuple[RangeMove, ...]

    def is_empty(self) -> bool:
        return not self.moves

    def lost_by(self, consumer: str) -> list[HashRange]:
        """The ranges `consumer` gave away in this change."""
        return [m.hash_range for m in self.moves if m.from_consumer == consumer]


@dataclass(frozen=True, slots=True, weakref_slot=True)
class OwnerTable:
    """A 65,536-entry lookup table for the dispatcher's hot loop.

    ``names[indexes[slot]]`` is the owner of ``slot`` (None for no owner),
    two list lookups per event instead of a search. ``names[0]`` is None and
    ``indexes[slot] == NO_OWNER`` means no owner; ``names[1:]`` are the
    attached consumers in name order. The table is shared: never mutate it.
    """

    indexes: array[int]
    names: tuple[str | None, ...]

    def owner_of(self, slot: int) -> str | None:
        return self.names[self.indexes[slot]]


class KeySharedSelector(Protocol):
    """What a dispatcher needs from any Key_Shared mode."""

    def add_consumer(
        self, name: str, now_ms: int, ranges: Sequence[HashRange] = ()
    ) -> RangeChanges:
        """Attach `name` (declared `ranges` are for sticky mode only).

        Raises:
            SelectorError: the name is taken, or the ranges are refused.
        """
        ...

    def remove_consumer(self, name: str) -> RangeChanges:
        """Detach `name`; its slots pass on as the mode says.

        Raises:
            UnknownConsumer: `name` is not attached.
        """
        ...

    def owner_of(self, slot: int) -> str | None: ...

    def ranges_of(self, name: str) -> list[HashRange]: ...

    def owner_table(self) -> OwnerTable: ...

    def consumers(self) -> list[str]: ...


def segment_owner(segments: Sequence[Segment], starts: Sequence[int], slot: int) -> str | None:
    """The owner of `slot`; `starts` holds each segment's slot_first."""
    i = bisect_right(starts, slot) - 1
    if i < 0 or segments[i][1] < slot:
        return None
    return segments[i][2]


def coalesce(segments: Iterable[Segment]) -> list[Segment]:
    """Merge touching segments of one owner; input must be sorted and disjoint."""
    merged: list[Segment] = []
    for first, last, name in segments:
        if merged and merged[-1][2] == name and merged[-1][1] + 1 == first:
            merged[-1] = (merged[-1][0], last, name)
        else:
            assert not merged or merged[-1][1] < first, "segments overlap or are unsorted"
            merged.append((first, last, name))
    return merged


def ranges_by_consumer(segments: Iterable[Segment]) -> dict[str, list[HashRange]]:
    """consumer -> its sorted ranges, for consumers owning at least one slot."""
    ranges: dict[str, list[HashRange]] = {}
    for first, last, name in segments:
        ranges.setdefault(name, []).append(HashRange(first, last))
    return ranges


# Tables in use, by what they are built from: equal tables are one object.
_TABLES: weakref.WeakValueDictionary[tuple[tuple[Segment, ...], tuple[str | None, ...]],
                                     OwnerTable] = weakref.WeakValueDictionary()


def build_owner_table(segments: Iterable[Segment], consumers: Iterable[str]) -> OwnerTable:
    """The 65,536-entry table of `segments`; `consumers` lists every attached name.

    A table is 256 KiB, and the partitions of a subscription have the same consumers
    and mostly the same segments (a consistent ring follows the consumers' names,
    sticky ranges are the consumers' own; auto-split follows each partition's rates,
    so its partitions may differ): so a table equal to one still in use is that one,
    not a copy (1,024 partitions of a subscription took 256 MiB of equal tables;
    Shared, Failover and Exclusive subscriptions have one table per active consumer).
    Tables are never mutated (`OwnerTable`); the caller keeps a reference for as long
    as it uses one."""
    segments = tuple(segments)
    names: tuple[str | None, ...] = (None, *sorted(consumers))
    key = (segments, names)
    table = _TABLES.get(key)
    if table is not None:
        return table
    index_of = {name: i for i, name in enumerate(names) if name is not None}
    indexes = array("I", bytes(4 * SLOT_COUNT))
    for first, last, name in segments:
        indexes[first : last + 1] = array("I", [index_of[name]]) * (last - first + 1)
    table = _TABLES[key] = OwnerTable(indexes, names)
    return table


def _owner_runs(segments: Sequence[Segment]) -> list[tuple[int, str | None]]:
    """(slot_first, owner) for every run of 0..65535, gaps included as None."""
    runs: list[tuple[int, str | None]] = []
    position = 0
    for first, last, name in segments:
        if first > position:
            runs.append((position, None))
        runs.append((first, name))
        position = last + 1
    if position < SLOT_COUNT:
        runs.append((position, None))
    return runs


def _moves(old: Sequence[Segment], new: Sequence[Segment]) -> list[RangeMove]:
    old_runs, new_runs = _owner_runs(old), _owner_runs(new)
    bounds = sorted({first for first, _ in old_runs} | {first for first, _ in new_runs})
    bounds.append(SLOT_COUNT)
    moves: list[RangeMove] = []
    i = j = 0
    for k in range(len(bounds) - 1):
        first = bounds[k]
        while i + 1 < len(old_runs) and old_runs[i + 1][0] <= first:
            i += 1
        while j + 1 < len(new_runs) and new_runs[j + 1][0] <= first:
            j += 1
        before, after = old_runs[i][1], new_runs[j][1]
        if before == after:
            continue
        last = bounds[k + 1] - 1
        previous = moves[-1] if moves else None
        if (previous is not None and previous.hash_range.slot_last + 1 == first
                and previous.from_consumer == before and previous.to_consumer == after):
            moves[-1] = RangeMove(HashRange(previous.hash_range.slot_first, last), before, after)
        else:
            moves.append(RangeMove(HashRange(first, last), before, after))
    return moves


def diff_segments(old: Sequence[Segment], new: Sequence[Segment]) -> RangeChanges:
    """The `RangeChanges` that turn the map `old` into the map `new`."""
    moves = _moves(old, new)
    if not moves:
        return RangeChanges({}, ())
    old_ranges, new_ranges = ranges_by_consumer(old), ranges_by_consumer(new)
    touched = {m.from_consumer for m in moves} | {m.to_consumer for m in moves}
    consumers = {
        name: (tuple(old_ranges.get(name, ())), tuple(new_ranges.get(name, ())))
        for name in sorted(n for n in touched if n is not None)
    }
    return RangeChanges(consumers, tuple(moves))


class SegmentSelector:
    """Shared read side of every mode: answers from `self._segments`.

    A mode sets `_segments` (via `_replace_segments`) and `_joined_ms`
    (name -> join time, the attached consumers); this class derives the rest
    and caches the owner table until the next change.
    """

    def __init__(self) -> None:
        self._segments: list[Segment] = []
        self._starts: list[int] = []
        self._joined_ms: dict[str, int] = {}
        self._table: OwnerTable | None = None

    def _replace_segments(self, segments: list[Segment]) -> RangeChanges:
        new = coalesce(segments)
        changes = diff_segments(self._segments, new)
        self._segments = new
        self._starts = [first for first, _, _ in new]
        self._table = None
        return changes

    def _refuse_duplicate(self, name: str) -> None:
        if name in self._joined_ms:
            raise DuplicateConsumer(
                f"consumer {name!r} is already attached to this subscription; "
                f"consumer names must be unique per Key_Shared subscription"
            )

    @staticmethod
    def _refuse_declared(name: str, ranges: Sequence[HashRange], mode: str) -> None:
        if ranges:
            raise SelectorError(
                f"consumer {name!r} declared hash ranges, which only sticky mode accepts; "
                f"{mode} assigns ranges itself"
            )

    def _check_known(self, name: str) -> None:
        if name not in self._joined_ms:
            raise UnknownConsumer(
                f"consumer {name!r} is not attached; attached: {sorted(self._joined_ms)}"
            )

    def owner_of(self, slot: int) -> str | None:
        return segment_owner(self._segments, self._starts, slot)

    def ranges_of(self, name: str) -> list[HashRange]:
        return [HashRange(first, last) for first, last, owner in self._segments if owner == name]

    def segments(self) -> list[Segment]:
        """The whole map as (slot_first, slot_last, consumer), in slot order."""
        return list(self._segments)

    def owner_table(self) -> OwnerTable:
        if self._table is None:
            self._table = build_owner_table(self._segments, self._joined_ms)
        return self._table

    def consumers(self) -> list[str]:
        return sorted(self._joined_ms)

    def joined_ms(self, name: str) -> int:
        """When `name` attached (the `now_ms` given to `add_consumer`)."""
        self._check_known(name)
        return self._joined_ms[name]
