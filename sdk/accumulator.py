"""The producer's batching buffer: events in, ready EventBatch requests out.

Job: collect events per partition as plain Python column lists and hand back
whole produce requests when a batch is ready. It is pure (no asyncio, grpc or
clock): the caller passes `now_ms`, and a batch's completion handle (a
"token", e.g. an asyncio.Future) comes from a factory the caller supplies.

Rules:
1. A batch is ready when it holds `batch_events_max` events, or its estimated
   size reaches `batch_bytes_max`, or it is `linger_ms` old.
2. `buffer_events_max` bounds the events held from `append` until the caller
   `release`s them (after the broker answered): past it `append` returns None
   so the caller can wait instead of growing the buffer.
3. Per-event work is a few list appends; optional columns (ordering key,
   source, opcode, schema, headers, event time) exist only in batches that
   use them and are sent as one broadcast entry when every event shares a value.
4. Protobuf objects are built once per batch, from the lists, in place inside
   the ProduceRequest (copying a built EventBatch into a request costs as much
   again as building it).

It must not know about streams, sequences or retries (see sender.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

from sdk.core.hashing import partition_of, slot_of
from sdk.core.pb import keybus_pb2 as pb

T = TypeVar("T")

# Estimated wire bytes per event beside its value: key, slot, field tags.
EVENT_OVERHEAD_BYTES = 16

# Default of every optional column (what an absent entry means on the wire).
COLUMN_DEFAULTS: dict[str, Any] = {
    "ordering_keys": "",
    "sources": "",
    "opcodes": pb.UPSERT,
    "schemas": "",
    "headers": None,
    "event_times_ms": 0,
}


class OpenBatch(Generic[T]):
    """One batch being filled: column lists plus what readiness needs."""

    __slots__ = ("bytes", "created_ms", "extras", "keys", "partition", "slots", "token",
                 "values")

    def __init__(self, partition: int, token: T, created_ms: int) -> None:
        self.partition = partition
        self.token = token
        self.created_ms = created_ms
        self.keys: list[int | str] = []
        self.values: list[bytes] = []
        self.slots: list[int] = []
        self.bytes = 0
        # Optional columns by EventBatch field name, created on first use.
        self.extras: dict[str, list[Any]] | None = None

    @property
    def count(self) -> int:
        return len(self.keys)


class ReadyBatch(NamedTuple, Generic[T]):
    """A batch ready to send: the request (batch filled in) and its token."""

    partition: int
    request: pb.ProduceRequest
    count: int
    token: T
    created_ms: int

    @property
    def batch(self) -> pb.EventBatch:
        return self.request.batch


class Accumulator(Generic[T]):
    """Per-partition batching buffer (see the module docstring for rules)."""

    def __init__(self, *, partitions: int, linger_ms: int, batch_events_max: int,
                 batch_bytes_max: int, buffer_events_max: int,
                 new_token: Callable[[], T]) -> None:
        assert partitions >= 1 and linger_ms >= 0
        assert 1 <= batch_events_max <= buffer_events_max and batch_bytes_max >= 1
        self.partitions = partitions
        self.linger_ms = linger_ms
        self.batch_events_max = batch_events_max
        self.batch_bytes_max = batch_bytes_max
        self.buffer_events_max = buffer_events_max
        self._new_token = new_token
        self._open: list[OpenBatch[T] | None] = [None] * partitions
        self._sealed: deque[OpenBatch[T]] = deque()
        # Events appended and not yet released (open, sealed or in flight).
        self.buffered_events = 0
        # Set when a batch opens or seals, so a drain task knows to look again.
        self.wake = False

    def has_room(self, n: int = 1) -> bool:
        """True when n more events fit under buffer_events_max."""
        return self.buffered_events + n <= self.buffer_events_max

    def append(self, partition: int, key: int | str, value: bytes, slot: int, size: int,
               now_ms: int) -> OpenBatch[T] | None:
        """Add one event with default optional columns.

        Args:
            size: estimated bytes of the event (value plus overhead).
        Returns:
            The batch holding the event (the event is its last one), or None
            when the buffer is full (nothing was added).
        """
        if self.buffered_events >= self.buffer_events_max:
            return None
        batch = self._open[partition]
        if batch is None:
            batch = self._open_batch(partition, now_ms)
        batch.keys.append(key)
        batch.values.append(value)
        batch.slots.append(slot)
        batch.bytes += size
        if batch.extras is not None:
            _pad_extras(batch.extras, len(batch.keys))
        self.buffered_events += 1
        if len(batch.keys) >= self.batch_events_max or batch.bytes >= self.batch_bytes_max:
            self._seal(batch)
        return batch

    def append_event(self, partition: int, key: int | str, value: bytes, slot: int, size: int,
                     now_ms: int, extras: dict[str, Any]) -> OpenBatch[T] | None:
        """Add one event that sets optional columns.

        Args:
            extras: non-default column values by EventBatch field name
                (ordering_keys, sources, opcodes, schemas, headers, event_times_ms).
        Returns:
            As `append`.
        """
        if self.buffered_events >= self.buffer_events_max:
            return None
        batch = self._open[partition]
        if batch is None:
            batch = self._open_batch(partition, now_ms)
        n = len(batch.keys)
        columns = batch.extras
        if columns is None:
            columns = batch.extras = {}
        for name, column_value in extras.items():
            column = columns.get(name)
            if column is None:
                column = columns[name] = [COLUMN_DEFAULTS[name]] * n
            column.append(column_value)
        return self.append(partition, key, value, slot, size, now_ms)

    def _open_batch(self, partition: int, now_ms: int) -> OpenBatch[T]:
        batch = OpenBatch(partition, self._new_token(), now_ms)
        self._open[partition] = batch
        self.wake = True
        return batch

    def _seal(self, batch: OpenBatch[T]) -> None:
        self._open[batch.partition] = None
        self._sealed.append(batch)
        self.wake = True

    def seal(self, partition: int) -> None:
        """Close the partition's open batch now, so later requests queue behind it."""
        batch = self._open[partition]
        if batch is not None:
            self._seal(batch)

    def next_ready_ms(self) -> int | None:
        """When the oldest open batch lingers out (None: nothing open)."""
        if self._sealed:
            return 0
        times = [b.created_ms for b in self._open if b is not None]
        return min(times) + self.linger_ms if times else None

    def drain(self, now_ms: int, force: bool = False) -> list[ReadyBatch[T]]:
        """Take every ready batch (all open ones too when force), in seal order.

        Per partition, batches come out in the order their events went in.
        """
        self.wake = False
        for batch in self._open:
            if batch is not None and (force or now_ms - batch.created_ms >= self.linger_ms):
                self._seal(batch)
        self.wake = False
        ready = [build_ready(batch) for batch in self._sealed]
        self._sealed.clear()
        return ready

    def release(self, count: int) -> None:
        """Give back buffer room for `count` events the broker has answered."""
        self.buffered_events -= count
        assert self.buffered_events >= 0

    @property
    def open_events(self) -> int:
        """Events in batches not yet drained."""
        return sum(b.count for b in self._open if b is not None) + sum(
            b.count for b in self._sealed)


def _pad_extras(columns: dict[str, list[Any]], n: int) -> None:
    """Give every optional column its default for events that did not set it."""
    for name, column in columns.items():
        if len(column) < n:
            column.append(COLUMN_DEFAULTS[name])


def build_ready(batch: OpenBatch[T]) -> ReadyBatch[T]:
    """Turn an open batch into a ProduceRequest (partition and batch set)."""
    request = pb.ProduceRequest(partition=batch.partition)
    fill_batch(request.batch, batch.keys, batch.values, batch.slots, batch.extras)
    return ReadyBatch(batch.partition, request, len(batch.keys), batch.token, batch.created_ms)


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
    column = out.key_ints if type(keys[0]) is int else out.key_strings
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

    __slots__ = ("_entries", "entries_max")

    def __init__(self, entries_max: int = 1 << 17) -> None:
        self._entries: dict[int | str, int] = {}
        self.entries_max = entries_max

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

