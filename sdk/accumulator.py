"""The producer's batching buffer: events in, ready EventBatch requests out.

Job: collect events per partition as plain Python column lists and hand back
whole produce requests when a batch is ready. It is pure (no asyncio, grpc or
clock): the caller passes `now_ms`, and a batch's completion handle (a
"token", e.g. an asyncio.Future) comes from a factory the caller supplies.

Rules:
1. A batch is ready when it holds `batch_events_max` events, or its estimated
   size reaches `batch_bytes_max`, or it is `linger_ms` old. An event that
   would take a batch past `batch_bytes_max` starts the next batch instead
   (so only a batch of one event can be larger).
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from sdk.core.hashing import partition_of, slot_of
from sdk.core.pb import keybus_pb2 as pb

T = TypeVar("T")

# Estimated wire bytes per event beside its value: key, slot, field tags.
EVENT_OVERHEAD_BYTES = 16

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

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


@dataclass(slots=True)
class ReadyBatch(Generic[T]):
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
        self._slots = SlotCache()
        self._slot_get = self._slots.get
        self._open: list[OpenBatch[T] | None] = [None] * partitions
        self._sealed: deque[OpenBatch[T]] = deque()
        # Events appended and not yet released (open, sealed or in flight).
        self.buffered_events = 0
        # Set when a batch opens or seals, so a drain task knows to look again.
        self.wake = False

    def has_room(self, n: int = 1) -> bool:
        """True when n more events fit under buffer_events_max."""
        return self.buffered_events + n <= self.buffer_events_max

    def reserve(self, n: int) -> bool:
        """Count n events sent around the open batches (bulk path) against the
        buffer bound; False (nothing counted) when they do not fit."""
        if self.buffered_events + n > self.buffer_events_max:
            return False
        self.buffered_events += n
        return True

    def add(self, key: Any, value: Any, ordering_key: Any, partition: int | None, source: str,
            opcode: int, schema: str, headers: Any, event_time_ms: int,
            now_ms: int) -> OpenBatch[T] | None:
        """Validate, route (slot of ordering_key else key; partition explicit else
        slot % partitions) and append one event. Returns its batch (the event is
        the last one), None when the buffer is full. Raises ValueError naming
        the argument that is not allowed."""
        if self.buffered_events >= self.buffer_events_max:
            return None
        if type(key) is int and INT64_MIN <= key <= INT64_MAX:
            size = EVENT_OVERHEAD_BYTES
        elif type(key) is str and key:
            size = EVENT_OVERHEAD_BYTES + len(key)
        else:
            key, size = _checked_key_size(key)
        if type(value) is not bytes:
            value = as_bytes(value, "value")
        slot = self._slot_get(key) if ordering_key is None else None
        if slot is None:
            ordering_key, slot = self._slot_slow(key, ordering_key)
        if partition is None:
            partition = slot % self.partitions
        elif type(partition) is not int or not 0 <= partition < self.partitions:
            raise partition_error(partition, self.partitions)
        if ordering_key or source or opcode or schema or headers or event_time_ms:
            return self.append_event(partition, key, value, slot, size + len(value), now_ms,
                                     extras_of(ordering_key, source, opcode, schema, headers,
                                               event_time_ms))
        # The common case, inlined: one call per event is a tenth of the budget.
        size += len(value)
        batch = self._open[partition]
        if batch is None or batch.bytes + size > self.batch_bytes_max:
            batch = self._batch_for(partition, size, now_ms)
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

    def _slot_slow(self, key: int | str, ordering_key: Any) -> tuple[str | None, int]:
        """Slot of a key not cached yet, or of a given ordering key (checked)."""
        if ordering_key is None:
            return None, self._slots.slot(key)
        ordering_key = check_ordering_key(ordering_key)
        return ordering_key, slot_of(ordering_key or key)

    def append(self, partition: int, key: int | str, value: bytes, slot: int, size: int,
               now_ms: int) -> OpenBatch[T] | None:
        """Add one checked event with default optional columns.

        Args:
            size: estimated bytes of the event (value plus overhead).
        Returns:
            The batch holding the event (the event is its last one), or None
            when the buffer is full (nothing was added).
        """
        return self.append_event(partition, key, value, slot, size, now_ms, {})

    def append_event(self, partition: int, key: int | str, value: bytes, slot: int, size: int,
                     now_ms: int, extras: dict[str, Any]) -> OpenBatch[T] | None:
        """Add one checked event that may set optional columns.

        Args:
            extras: non-default column values by EventBatch field name
                (ordering_keys, sources, opcodes, schemas, headers, event_times_ms).
        Returns:
            As `append`.
        """
        if self.buffered_events >= self.buffer_events_max:
            return None
        batch = self._batch_for(partition, size, now_ms)
        n = len(batch.keys)
        if extras:
            columns = batch.extras
            if columns is None:
                columns = batch.extras = {}
            for name, column_value in extras.items():
                column = columns.get(name)
                if column is None:
                    column = columns[name] = [COLUMN_DEFAULTS[name]] * n
                column.append(column_value)
        batch.keys.append(key)
        batch.values.append(value)
        batch.slots.append(slot)
        batch.bytes += size
        columns = batch.extras
        if columns is not None and len(columns) != len(extras):
            _pad_extras(columns, n + 1)
        self.buffered_events += 1
        if n + 1 >= self.batch_events_max or batch.bytes >= self.batch_bytes_max:
            self._seal(batch)
        return batch

    def _batch_for(self, partition: int, size: int, now_ms: int) -> OpenBatch[T]:
        """The batch an event of `size` bytes goes to: a new one when the open
        one would pass batch_bytes_max (a batch exceeds it only with one event)."""
        batch = self._open[partition]
        if batch is not None and batch.keys and batch.bytes + size > self.batch_bytes_max:
            self._seal(batch)
            batch = None
        return batch or self._open_batch(partition, now_ms)

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


def _checked_key_size(key: Any) -> tuple[int | str, int]:
    key = check_key(key)
    return key, EVENT_OVERHEAD_BYTES + (len(key) if type(key) is str else 0)


def partition_error(partition: Any, partitions: int) -> ValueError:
    """The error for a partition outside the topic's."""
    return ValueError(f"partition {partition!r} is invalid: the topic has partitions "
                      f"0..{partitions - 1}")


def check_key(key: Any, name: str = "key") -> int | str:
    """A key as a plain int (int64) or non-empty str.

    Raises:
        ValueError: naming `name` and what a key may be.
    """
    if isinstance(key, int) and not isinstance(key, bool):
        if INT64_MIN <= key <= INT64_MAX:
            return int(key)
        raise ValueError(f"{name} {key} is out of the int64 range "
                         f"[{INT64_MIN}, {INT64_MAX}]")
    if isinstance(key, str) and key:
        return str(key)
    raise ValueError(f"{name} must be an int in the int64 range or a non-empty str; "
                     f"got {key!r}")


def check_keys(keys: Sequence[Any], name: str = "keys") -> list[int | str]:
    """Every key checked as `check_key` does; errors name `name[i]`."""
    out: list[Any] = list(keys)
    for i, key in enumerate(out):
        t = type(key)
        if t is int:
            if not INT64_MIN <= key <= INT64_MAX:
                check_key(key, f"{name}[{i}]")
        elif t is not str or not key:
            out[i] = check_key(key, f"{name}[{i}]")
    return out


def check_ordering_key(ordering_key: Any, name: str = "ordering_key") -> str:
    """An ordering key as str ("" = fall back to the key); ints become text."""
    if isinstance(ordering_key, str):
        return str(ordering_key)
    if isinstance(ordering_key, int) and not isinstance(ordering_key, bool):
        return str(ordering_key)
    raise ValueError(f"{name} must be a str, an int or None; got {ordering_key!r}")


def as_bytes(value: Any, name: str = "value") -> bytes:
    """A value as bytes: bytes-like objects are copied, str is UTF-8 encoded.

    Raises:
        ValueError: naming `name` when the value is none of those.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise ValueError(f"{name} must be bytes (or bytearray, memoryview, str); "
                     f"got {type(value).__name__}")


def extras_of(ordering_key: str | None, source: Any, opcode: Any, schema: Any, headers: Any,
              event_time_ms: Any) -> dict[str, Any]:
    """Validated non-default optional columns of one event, by field name.

    Raises:
        ValueError: naming the argument that is not allowed.
    """
    extras: dict[str, Any] = {}
    if ordering_key:
        extras["ordering_keys"] = ordering_key
    if source:
        extras["sources"] = source if type(source) is str else _check_str(source, "source")
    if opcode:
        if opcode not in (pb.UPSERT, pb.DELETE) or isinstance(opcode, bool):
            raise ValueError(f"opcode {opcode!r} is invalid: use UPSERT (0) or DELETE (1)")
        extras["opcodes"] = int(opcode)
    if schema:
        extras["schemas"] = _check_str(schema, "schema")
    if headers:
        extras["headers"] = check_headers(headers)
    if event_time_ms:
        if not isinstance(event_time_ms, int) or isinstance(event_time_ms, bool):
            raise ValueError(f"event_time_ms must be an int (milliseconds); got {event_time_ms!r}")
        extras["event_times_ms"] = event_time_ms
    return extras


def event_columns(n: int, sources: Sequence[Any] | None = None,
                  opcodes: Sequence[Any] | None = None, schemas: Sequence[Any] | None = None,
                  headers: Sequence[Any] | None = None,
                  event_times_ms: Sequence[Any] | None = None) -> dict[str, list[Any]]:
    """Validated per-event optional columns of a bulk send, by EventBatch field name.

    Args:
        n: the number of events; every column given must have n entries.
        sources / schemas: str each ("" = none). opcodes: UPSERT (0) or
            DELETE (1) each. headers: a dict of str to bytes, or None, each.
        event_times_ms: int milliseconds each (0 = not set).
    Returns:
        One list per column given (None columns are left out), entries
        normalised as `extras_of` does; headers None becomes {}.
    Raises:
        ValueError: a length differs, or naming the first bad entry (sources[i]).
    """
    given = {"sources": sources, "opcodes": opcodes, "schemas": schemas, "headers": headers,
             "event_times_ms": event_times_ms}
    out: dict[str, list[Any]] = {}
    for name, column in given.items():
        if column is None:
            continue
        if isinstance(column, str | bytes | Mapping) or len(column) != n:
            size = len(column) if not isinstance(column, str | bytes | Mapping) else "not a list"
            raise ValueError(f"{name} must be a list with one entry per key ({n}); got {size}")
        out[name] = _check_column(name, column)
    return out


def _check_column(name: str, column: Sequence[Any]) -> list[Any]:
    if name in ("sources", "schemas"):
        return [v if type(v) is str else _check_str(v, f"{name}[{i}]")
                for i, v in enumerate(column)]
    if name == "opcodes":
        for i, v in enumerate(column):
            if v not in (pb.UPSERT, pb.DELETE) or type(v) is not int:
                raise ValueError(f"opcodes[{i}] is {v!r}: use UPSERT (0) or DELETE (1)")
        return list(column)
    if name == "headers":
        return [check_headers(v, f"headers[{i}]") if v else {} for i, v in enumerate(column)]
    for i, v in enumerate(column):
        if type(v) is not int:
            raise ValueError(f"event_times_ms[{i}] must be an int (milliseconds); got {v!r}")
    return list(column)


def _check_str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str; got {value!r}")
    return value


def check_headers(headers: Any, name: str = "headers") -> dict[str, bytes]:
    """Headers as dict[str, bytes] (str values are UTF-8 encoded)."""
    if not isinstance(headers, Mapping):
        raise ValueError(f"{name} must be a dict of str to bytes; got {type(headers).__name__}")
    out: dict[str, bytes] = {}
    for k, v in headers.items():
        if not isinstance(k, str):
            raise ValueError(f"{name} key {k!r} must be a str")
        out[k] = as_bytes(v, f"{name}[{k!r}]")
    return out


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
