"""Columns to requests: EventBatch filling, partition splits, chunking, windows.

Pure (no asyncio, grpc or clock). The bulk path (`send_batch`) and the window
path (`send_window`) of the producer build whole requests from column lists
here, so no Python object is made per event; the accumulator builds its
batches with `fill_batch` too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sdk.core.columns import SCN_SUPPLIED_MAX
from sdk.core.hashing import partition_of, slot_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.event_checks import (
    COLUMN_DEFAULTS,
    EVENT_OVERHEAD_BYTES,
    as_bytes,
    check_key,
    check_ordering_key,
    extras_of,
)


def fill_batch(out: pb.EventBatch, keys: Sequence[int | str], values: Sequence[bytes],
               slots: Sequence[int], extras: dict[str, list[Any]] | None = None) -> None:
    """Write columns into an empty EventBatch with bulk `extend` calls.

    Optional columns whose entries are all equal go out as one broadcast entry.
    """
    n = len(keys)
    out.count = n
    fill_keys(out, keys)
    out.values.extend(values)
    out.slots.extend(slots)
    for name, column in (extras or {}).items():
        if column.count(column[0]) == n:
            column = column[:1]
        if name == "headers":
            out.headers.extend(pb.Headers(entries=h or {}) for h in column)
        else:
            getattr(out, name).extend(column)


def fill_keys(out: pb.EventBatch, keys: Sequence[int | str]) -> None:
    """Key columns per the rule: ints only, strings only, or both when mixed.

    Tries the one-column form first (no per-key Python work); a TypeError from
    the C extend means the batch mixes key types.
    """
    if not keys:
        return
    column: Any = out.key_ints if type(keys[0]) is int else out.key_strings
    try:
        column.extend(keys)
        return
    except TypeError:
        out.ClearField("key_ints")
        out.ClearField("key_strings")
    out.key_ints.extend([k if type(k) is int else 0 for k in keys])
    out.key_strings.extend([k if type(k) is str else "" for k in keys])


class SlotCache:
    """Memoized `slot_of` for primary keys: a dict hit is ~3x cheaper than
    murmur3 of the key's text. Bounded: cleared when it reaches `entries_max`."""

    __slots__ = ("_entries", "entries_max", "get")

    def __init__(self, entries_max: int = 1 << 17) -> None:
        self._entries: dict[int | str, int] = {}
        self.entries_max = entries_max
        # The cached slot of a key, or None: the dict's own get, no wrapper call.
        self.get: Callable[[int | str], int | None] = self._entries.get

    def slot(self, key: int | str) -> int:
        """The slot of `key` (as `sdk.core.hashing.slot_of`)."""
        slot = self._entries.get(key)
        if slot is None:
            entries = self._entries
            if len(entries) >= self.entries_max:
                entries.clear()
            slot = entries[key] = slot_of(key)
        return slot


class Columns(NamedTuple):
    """One partition's share of a columnar bulk send."""

    partition: int
    keys: list[int | str]
    values: list[bytes]
    slots: list[int]
    ordering_keys: list[str]
    indexes: list[int]  # position of each event in the caller's input


def split_columns(keys: Sequence[int | str], values: Sequence[bytes], slots: Sequence[int],
                  ordering_keys: Sequence[str] | None, partitions: int,
                  partition: int | None) -> list[Columns]:
    """Split a bulk send by partition (explicit, else slot % partitions).

    Returns one Columns per partition that received events, in partition order.
    """
    ordering = list(ordering_keys) if ordering_keys else []
    if partition is not None or partitions == 1:
        target = 0 if partition is None else partition
        return [Columns(target, list(keys), list(values), list(slots), ordering,
                        list(range(len(keys))))]
    parts: dict[int, Columns] = {}
    for i, slot in enumerate(slots):
        p = partition_of(slot, partitions)
        part = parts.get(p)
        if part is None:
            part = parts[p] = Columns(p, [], [], [], [], [])
        part.keys.append(keys[i])
        part.values.append(values[i])
        part.slots.append(slot)
        part.indexes.append(i)
        if ordering:
            part.ordering_keys.append(ordering[i])
    return [parts[p] for p in sorted(parts)]


def chunk_bounds(sizes: Sequence[int], events_max: int, bytes_max: int) -> list[tuple[int, int]]:
    """Half-open [start, stop) chunks of consecutive events under both limits.

    Args:
        sizes: estimated bytes per event.
    Returns:
        Chunks covering every event; a lone event over bytes_max gets its own.
    """
    bounds: list[tuple[int, int]] = []
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start >= events_max or total + size > bytes_max):
            bounds.append((start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        bounds.append((start, len(sizes)))
    return bounds



@dataclass(frozen=True, slots=True)
class WindowEvent:
    """One event of a consistency window (see Producer.send_window)."""

    key: int | str
    value: bytes
    ordering_key: str | int | None = None
    source: str = ""
    opcode: int = pb.UPSERT
    schema: str = ""
    headers: dict[str, bytes] | None = None
    event_time_ms: int = 0


_WINDOW_FIELDS = frozenset(WindowEvent.__dataclass_fields__)


def window_columns(events: Sequence[WindowEvent | Mapping[str, Any]]) -> tuple[
        list[int | str], list[bytes], list[int], dict[str, list[Any]]]:
    """Validated columns of a window: keys, values, slots and optional columns.

    Args:
        events: WindowEvent objects or dicts with the same field names.
    Raises:
        ValueError: naming the event (events[i].field) that is not allowed.
    """
    keys: list[int | str] = []
    values: list[bytes] = []
    slots: list[int] = []
    rows: list[dict[str, Any]] = []
    for i, event in enumerate(events):
        row = _window_row(event, i)
        key = check_key(row.get("key"), f"events[{i}].key")
        ordering = row.get("ordering_key")
        ordering = None if ordering is None else check_ordering_key(
            ordering, f"events[{i}].ordering_key")
        keys.append(key)
        values.append(as_bytes(row.get("value"), f"events[{i}].value"))
        slots.append(slot_of(ordering or key))
        rows.append(extras_of(ordering, row.get("source", ""), row.get("opcode", pb.UPSERT),
                              row.get("schema", ""), row.get("headers"),
                              row.get("event_time_ms", 0)))
    names = sorted({name for row in rows for name in row})
    extras = {name: [row.get(name, COLUMN_DEFAULTS[name]) for row in rows] for name in names}
    return keys, values, slots, extras


def _window_row(event: WindowEvent | Mapping[str, Any], i: int) -> dict[str, Any]:
    if isinstance(event, WindowEvent):
        return {name: getattr(event, name) for name in _WINDOW_FIELDS}
    if isinstance(event, Mapping):
        unknown = set(event) - _WINDOW_FIELDS
        if unknown:
            raise ValueError(f"events[{i}] has unknown fields {sorted(unknown)}; "
                             f"allowed: {sorted(_WINDOW_FIELDS)}")
        return dict(event)
    raise ValueError(f"events[{i}] must be a WindowEvent or a dict; got {type(event).__name__}")


def columns_of_part(columns: dict[str, list[Any]], indexes: list[int],
                     n: int) -> dict[str, list[Any]]:
    """Per-event columns restricted to one partition's events (input order)."""
    if len(indexes) == n:  # every event went to this partition, in order
        return columns
    return {name: [column[i] for i in indexes] for name, column in columns.items()}


def window_request(topic: str, partitions: int,
                   events: Sequence[WindowEvent | Mapping[str, Any]], partition: int,
                   scn: int | None, window_events_max: int,
                   window_bytes_max: int) -> pb.ProduceRequest:
    """Validate a consistency window against the limits and build its request.

    Raises:
        ValueError: empty or over a limit, a bad partition or SCN, or a bad
            event field (named).
    """
    if not events or len(events) > window_events_max:
        raise ValueError(f"a window has {len(events)} events; allowed 1.."
                         f"{window_events_max} (window_events_max)")
    if type(partition) is not int or not 0 <= partition < partitions:
        raise ValueError(f"partition {partition!r} is invalid: the topic has partitions "
                         f"0..{partitions - 1}")
    if scn is not None and (type(scn) is not int or not 1 <= scn <= SCN_SUPPLIED_MAX):
        raise ValueError(f"scn {scn!r} is invalid: an SCN is an int in 1..{SCN_SUPPLIED_MAX} "
                         "(a signed 64-bit integer), or None")
    keys, values, slots, extras = window_columns(events)
    size = sum(map(len, values)) + EVENT_OVERHEAD_BYTES * len(values)
    if size > window_bytes_max:
        raise ValueError(f"the window is about {size} bytes; the limit is "
                         f"window_bytes_max={window_bytes_max}")
    request = pb.ProduceRequest(topic=topic, partition=partition, window=True, scn=scn or 0)
    fill_batch(request.batch, keys, values, slots, extras)
    return request
