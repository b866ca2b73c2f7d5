"""Turn one window (or one delivered piece of it) into the callback sequence.

Job: the pure planning half of the window runner. Given a piece's source
and slot columns, the registration's source order and the group's size, it
returns the calls every member makes, cut into segments at the barriers.

Rules:
1. Events are presented grouped by source, in the order the registration
   declared (no declared order: first appearance in the window), and by
   offset within a source. Events of sources the registration did not ask
   for are not presented. A source with no events gets no start/end calls.
2. In a group of n members, every member gets every boundary call and the
   data events of its keys: member m serves the slots of `equal_splits(n)[m]`,
   so one key always goes to one member and per-key order holds.
3. Barriers are the seed's (`BARRIER_BEFORE`, `BARRIER_AFTER`). A segment
   is a run of calls with no barrier inside; every member runs a segment's
   calls in order, members concurrently, and all meet at the segment's end.
   So `on_start_source` and the source's events share a segment (no barrier
   after `on_start_source`), and `on_end_source` starts a new one.
4. Columns follow the broadcast rule: a `sources` or `schemas` column with
   one entry applies to every event.

It must not know about protobuf, asyncio, clocks or how a call is made: the
shell's event columns travel through as an opaque `payload`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sdk.core.model import equal_splits

# The seed: "onStartDataEventSequence, onEndDataEventSequence, onCheckpoint, onError,
# onEndSource have barriers before the invocation and after the completion of the
# callback; onStartSource has a barrier before the invocation; onRollback has a barrier
# after the completion". Start/stop consumption follow Databus's MultiConsumerCallback.
BARRIER_BEFORE = frozenset({"on_start_window", "on_end_window", "on_checkpoint", "on_error",
                            "on_end_source", "on_start_source", "on_stop_consumption",
                            # bootstrap (bootstrap_callbacks.py): as their stream twins
                            "on_start_bootstrap_sequence", "on_end_bootstrap_sequence",
                            "on_bootstrap_checkpoint", "on_end_bootstrap_source",
                            "on_start_bootstrap_source", "on_start_bootstrap",
                            "on_end_bootstrap"})
BARRIER_AFTER = frozenset({"on_start_window", "on_end_window", "on_checkpoint", "on_error",
                           "on_end_source", "on_rollback", "on_start_consumption",
                           "on_stop_consumption",
                           "on_start_bootstrap_sequence", "on_end_bootstrap_sequence",
                           "on_bootstrap_checkpoint", "on_end_bootstrap_source",
                           "on_bootstrap_rollback", "on_start_bootstrap", "on_end_bootstrap"})
MEMBERS_MAX = 256


class Scn(int):
    """A window's SCN (an int) with the partition it belongs to: SCNs increase
    per partition, so a consumer of several partitions needs both."""

    partition: int

    def __new__(cls, value: int, partition: int = 0) -> Scn:
        scn = super().__new__(cls, value)
        scn.partition = partition
        return scn

    def __repr__(self) -> str:
        return f"Scn({int(self)}, partition={self.partition})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Scn, (int(self), self.partition))


@dataclass(frozen=True, slots=True)
class WindowPiece:
    """The events of one window this registration receives, or one piece of them.

    Attributes:
        partition, scn: the window's partition and SCN.
        offset_last: the last offset of the window known so far (where a
            checkpoint after this window resumes from: offset_last + 1).
        positions: the positions of the piece's events in its columns, in
            offset order.
        sources, schemas: columns under the broadcast rule (1 entry = all).
        slots: each position's hash slot; needed only when the group has
            more than one member.
        payload: the shell's event columns, passed through to the calls.
        size_bytes: the piece's value bytes (for the window buffer's limit).
        bootstrap: a bootstrap sequence (snapshot rows or a catch-up window):
            presented with the bootstrap callbacks.
        position: where a checkpoint after this piece resumes a bootstrap
            (opaque here: the shell's); None for an ordinary window.
    """

    partition: int
    scn: int
    offset_last: int
    positions: Sequence[int]
    sources: Sequence[str]
    schemas: Sequence[str]
    slots: Sequence[int]
    payload: object
    size_bytes: int = 0
    bootstrap: bool = False
    position: object = None


@dataclass(frozen=True, slots=True)
class Call:
    """One boundary callback, made by every member with the same arguments."""

    name: str
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class EventsCall:
    """`on_event` for each position of `slices[m]`, made by member m."""

    source: str
    payload: object
    slices: tuple[Sequence[int], ...]

    name = "on_event"


@dataclass(frozen=True, slots=True)
class BootstrapEventsCall(EventsCall):
    """`on_bootstrap_event` for each position of `slices[m]`, made by member m."""

    name = "on_bootstrap_event"


# The callbacks of a window, and of a bootstrap sequence.
_WINDOW_NAMES = ("on_start_window", "on_start_source", "on_end_source", "on_end_window")
_SEQUENCE_NAMES = ("on_start_bootstrap_sequence", "on_start_bootstrap_source",
                   "on_end_bootstrap_source", "on_end_bootstrap_sequence")


@dataclass(frozen=True, slots=True)
class Segment:
    """Calls with no barrier between them; all members meet after the last."""

    calls: tuple[Call | EventsCall, ...]


def owner_table(members_n: int) -> bytes:
    """slot -> member index (one byte per slot): member m serves equal_splits(n)[m]."""
    if not 1 <= members_n <= MEMBERS_MAX:
        raise ValueError(f"a group has {members_n} members; allowed 1..{MEMBERS_MAX}")
    table = bytearray(65536)
    for member, hash_range in enumerate(equal_splits(members_n)):
        table[hash_range.slot_first:hash_range.slot_last + 1] = bytes([member % 256]) * \
            hash_range.size
    return bytes(table)


def group_by_source(piece: WindowPiece,
                    order: Sequence[str] | None) -> list[tuple[str, str, Sequence[int]]]:
    """(source, schema, positions) per source present, in the registration's order."""
    sources, positions = piece.sources, piece.positions
    if not positions:
        return []
    if len(sources) <= 1:
        source = sources[0] if sources else ""
        if order is not None and source not in order:
            return []
        return [(source, _schema_at(piece.schemas, positions[0]), positions)]
    groups: dict[str, list[int]] = {}
    for i in positions:
        source = sources[i]
        group = groups.get(source)
        if group is None:
            groups[source] = [i]
        else:
            group.append(i)
    names = list(groups) if order is None else [s for s in order if s in groups]
    return [(name, _schema_at(piece.schemas, groups[name][0]), groups[name]) for name in names]


def _schema_at(schemas: Sequence[str], i: int) -> str:
    if not schemas:
        return ""
    return schemas[0] if len(schemas) == 1 else schemas[i]


def split_members(positions: Sequence[int], slots: Sequence[int], owners: bytes,
                  members_n: int) -> tuple[Sequence[int], ...]:
    """Positions per member by slot (rule 2); one member gets them all."""
    if members_n == 1:
        return (positions,)
    buckets: tuple[list[int], ...] = tuple([] for _ in range(members_n))
    appends = [bucket.append for bucket in buckets]
    for i in positions:
        appends[owners[slots[i]]](i)
    return buckets


def plan_piece(piece: WindowPiece, opens: bool, closes: bool, order: Sequence[str] | None,
               owners: bytes, members_n: int) -> list[Segment]:
    """The segments of one piece: start window (if it opens it), each source's
    start/events/end, end window (if it closes it)."""
    scn = Scn(piece.scn, piece.partition)
    start, start_source, end_source, end = _SEQUENCE_NAMES if piece.bootstrap else _WINDOW_NAMES
    events = BootstrapEventsCall if piece.bootstrap else EventsCall
    calls: list[Call | EventsCall] = []
    if opens:
        calls.append(Call(start, (scn,)))
    for source, schema, positions in group_by_source(piece, order):
        calls.append(Call(start_source, (source, schema)))
        calls.append(events(source, piece.payload,
                            split_members(positions, piece.slots, owners, members_n)))
        calls.append(Call(end_source, (source,)))
    if closes:
        calls.append(Call(end, (scn,)))
    return cut_segments(calls)


def cut_segments(calls: Sequence[Call | EventsCall]) -> list[Segment]:
    """Cut a call sequence wherever a barrier stands (rule 3)."""
    segments: list[Segment] = []
    current: list[Call | EventsCall] = []
    for call in calls:
        if current and (call.name in BARRIER_BEFORE or current[-1].name in BARRIER_AFTER):
            segments.append(Segment(tuple(current)))
            current = []
        current.append(call)
    if current:
        segments.append(Segment(tuple(current)))
    return segments


