"""The producer's batching buffer: events in, ready EventBatch requests out.

Job: collect events per partition as plain Python column lists and hand back
whole produce requests when a batch is ready. It is pure (no asyncio, grpc or
clock): the caller passes `now_ms`, and a batch's completion handle (a
"token", e.g. an asyncio.Future) comes from a factory the caller supplies.

Rules:
1. A batch is ready when it holds `batch_events_max` events, or its estimated
   size reaches `batch_bytes_max`, or it is `linger_ms` old, or (Nagle's rule)
   its partition has no request outstanding: the caller passes the partitions
   that are `busy`, and only their batches wait, for an answer or for their
   linger, whichever comes first. So a lone event leaves at once, and events
   that arrive while a request is on the wire gather into the next one. An
   event that would take a batch past `batch_bytes_max` starts the next batch
   instead (so only a batch of one event can be larger).
2. `buffer_events_max` bounds the events held from `append` until the caller
   `release`s them (after the broker answered): past it `append` returns None
   so the caller can wait instead of growing the buffer.
3. Per-event work is a few list appends; optional columns (ordering key,
   source, opcode, schema, headers, event time) exist only in batches that
   use them and are sent as one broadcast entry when every event shares a value.
4. Protobuf objects are built once per batch, from the lists, in place inside
   the ProduceRequest (copying a built EventBatch into a request costs as much
   again as building it).

It must not know about streams, sequences or retries (see sender.py). Field
checks live in event_checks.py, column-to-request building in event_batches.py.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sdk.core.hashing import slot_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.wire_ints import INT64_MAX, INT64_MIN  # re-exported
from sdk.event_batches import (  # re-exported: callers import them from here
    Columns,
    SlotCache,
    WindowEvent,
    chunk_bounds,
    fill_batch,
    fill_keys,
    split_columns,
    window_columns,
)
from sdk.event_checks import (  # re-exported: callers import them from here
    COLUMN_DEFAULTS,
    EVENT_OVERHEAD_BYTES,
    _checked_key_size,
    as_bytes,
    check_headers,
    check_key,
    check_keys,
    check_ordering_key,
    event_columns,
    extras_of,
    partition_error,
)

T = TypeVar("T")

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
        self.open_batches = 0  # batches open now (being filled), over all partitions
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
        self.open_batches += 1
        self.wake = True
        return batch

    def _seal(self, batch: OpenBatch[T]) -> None:
        self._open[batch.partition] = None
        self.open_batches -= 1
        self._sealed.append(batch)
        self.wake = True

    def seal(self, partition: int) -> None:
        """Close the partition's open batch now, so later requests queue behind it."""
        batch = self._open[partition]
        if batch is not None:
            self._seal(batch)

    def next_ready_ms(self, busy: Container[int] | None = None) -> int | None:
        """When the next open batch is ready: 0 when one is sealed or (given
        `busy`) one of a partition not in it is open; else when the oldest open
        batch lingers out (None: nothing open)."""
        if self._sealed:
            return 0
        times = [b.created_ms for b in self._open if b is not None]
        if busy is not None and any(b is not None and b.partition not in busy for b in self._open):
            return 0
        return min(times) + self.linger_ms if times else None

    @property
    def waiting(self) -> bool:
        """Some batch is open or sealed (not drained yet)."""
        return bool(self.open_batches or self._sealed)

    @property
    def has_sealed(self) -> bool:
        """A batch is full (or was sealed) and waits to be drained."""
        return bool(self._sealed)

    def drain(self, now_ms: int, force: bool = False,
              busy: Container[int] | None = None) -> list[ReadyBatch[T]]:
        """Take every ready batch, in seal order: full ones, lingered-out ones,
        every open one when `force`, and (when `busy` is given) the open one of
        every partition not in `busy` (rule 1).

        Per partition, batches come out in the order their events went in.
        """
        self.wake = False
        for batch in self._open:
            if batch is not None and (force or now_ms - batch.created_ms >= self.linger_ms
                                      or (busy is not None and batch.partition not in busy)):
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


__all__ = ["COLUMN_DEFAULTS", "EVENT_OVERHEAD_BYTES", "INT64_MAX", "INT64_MIN", "Accumulator",
           "Columns", "OpenBatch", "ReadyBatch", "SlotCache", "WindowEvent", "as_bytes",
           "build_ready", "check_headers", "check_key", "check_keys", "check_ordering_key",
           "chunk_bounds", "event_columns", "extras_of", "fill_batch", "fill_keys",
           "partition_error", "split_columns", "window_columns"]
