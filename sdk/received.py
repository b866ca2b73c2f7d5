"""What a consumer receives: `ReceivedBatch` (one delivered record, columns
kept protobuf), `Message` (one event as a row), `delivered_batches` (a
Delivery's records as batches), `batch_without` (a batch less some of its
events, for redeliveries already handed out), `rest_of_slots_removed` (what
a nack takes back from what the consumer holds but did not hand out) and
`partition_dropped` (what a seek made stale).

Split from consumer.py (one job per file); `sdk.consumer` re-exports them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from sdk.core.columns import Event, batch_slots, record_events
from sdk.core.pb import keybus_pb2 as pb
from sdk.fetch_buffer import FetchBuffer
from sdk.reader import ReadBatch


@dataclass(frozen=True, slots=True)
class Message:
    """One received event with its delivery facts."""

    event: Event
    redelivery_count: int = 0
    window_last_offset: int = 0

    @property
    def partition(self) -> int:
        return self.event.partition

    @property
    def offset(self) -> int:
        return self.event.offset

    @property
    def key(self) -> int | str:
        return self.event.key

    @property
    def value(self) -> bytes:
        return self.event.value


class ReceivedBatch(ReadBatch):
    """The events of one stored record delivered to this consumer (columns stay
    protobuf): a ReadBatch plus what delivery adds (redelivery counts, where the
    record's window ends, whether this consumer's share of that window ends here)."""

    __slots__ = ("redelivery_counts", "send", "share_ends", "window_last_offset")

    def __init__(self, record: pb.Record, redelivery_counts: Sequence[int],
                 window_last_offset: int, send: int = 0, share_ends: bool | None = None
                 ) -> None:
        super().__init__(record)
        self.redelivery_counts = redelivery_counts  # empty: all first deliveries
        self.window_last_offset = window_last_offset
        self.send = send  # the broker's send it came in (Delivery.send; 0: unknown)
        # True: the broker sends no more of this window to this consumer (events given
        # back later aside); False: more follows; None: the broker does not say.
        self.share_ends = share_ends

    @property
    def partition(self) -> int:
        return self.record.partition

    @property
    def slots(self) -> Sequence[int]:
        """One slot per event, in order. A broadcast column (one entry for every event,
        as the wire contract allows; the broker stores it as sent) is expanded, so the
        slots line up with `offsets`: nack, its rest of the slot and the stale check zip
        the two, and raised ValueError on such a record."""
        slots = self.record.batch.slots
        return slots if len(slots) == self.count else batch_slots(self.record.batch)

    def messages(self) -> list[Message]:
        """Row views (a Python object per event)."""
        counts = self.redelivery_counts or [0] * self.count
        return [Message(e, c, self.window_last_offset)
                for e, c in zip(record_events(self.record), counts, strict=True)]


def delivered_batches(delivery: pb.Delivery, marks_share_ends: bool = False
                      ) -> list[ReceivedBatch]:
    """A Delivery's records as ReceivedBatches, each with its share of the
    redelivery counts (empty: all first deliveries) and its window's last offset;
    `marks_share_ends` (the broker said so on open): each also says whether this
    consumer's share of its window ends with it."""
    counts = delivery.redelivery_counts
    lasts = delivery.window_last_offsets
    send = delivery.send
    if not counts:
        batches = [ReceivedBatch(record, (), last, send)
                   for record, last in zip(delivery.records, lasts, strict=True)]
    else:
        batches = []
        position = 0
        for record, last in zip(delivery.records, lasts, strict=True):
            n = record.batch.count
            batches.append(ReceivedBatch(record, counts[position:position + n], last, send))
            position += n
    if marks_share_ends:
        _mark_share_ends(batches, delivery.open_windows)
    return batches


def _mark_share_ends(batches: list[ReceivedBatch], open_windows: Sequence[int]) -> None:
    """A batch ends its window's share unless the broker lists the window as open
    or a later batch of the same delivery carries more of it (a part split in two)."""
    following = set(open_windows)
    for batch in reversed(batches):
        batch.share_ends = batch.window_last_offset not in following
        following.add(batch.window_last_offset)


def batch_without(batch: ReceivedBatch, drop: set[int]) -> ReceivedBatch | None:
    """A copy of `batch` without the events at positions `drop` (None if none is left)."""
    keep = [i for i in range(batch.count) if i not in drop]
    if not keep:
        return None
    record = batch.record
    source = record.batch
    subset = pb.Record(topic=record.topic, partition=record.partition,
                       base_offset=record.base_offset, scn_first=record.scn_first,
                       window=record.window, publish_time_ms=record.publish_time_ms)
    subset.offsets.extend(batch.offsets[i] for i in keep)
    subset.batch.count = len(keep)
    count = source.count
    for descriptor, column in source.ListFields():
        if descriptor.name == "count":
            continue
        target = getattr(subset.batch, descriptor.name)
        if len(column) == count and count > 1:
            target.extend(column[i] for i in keep)
        else:
            target.extend(column)
    counts = [batch.redelivery_counts[i] for i in keep] if batch.redelivery_counts else ()
    return ReceivedBatch(subset, counts, batch.window_last_offset, batch.send, batch.share_ends)


def rest_of_slots_removed(buffer: FetchBuffer[ReceivedBatch], current: deque[Message], partition: int,
                          first: dict[int, int]) -> tuple[deque[Message], list[int]]:
    """Take out of the buffered batches and the messages not handed out yet (`current`)
    the events of `partition` that come after their slot's first nacked offset (`first`:
    slot -> offset), so a nack's retry is not overtaken by them. The messages kept, and
    the offsets taken out (given back with the nack)."""
    removed: list[int] = []

    def after_nack(slot: int, offset: int) -> bool:
        return offset > first.get(slot, offset)

    def cut(batch: ReceivedBatch) -> tuple[ReceivedBatch | None, int]:
        drop = [i for i, (o, s) in enumerate(zip(batch.offsets, batch.slots, strict=True))
                if after_nack(s, o)]
        if not drop:
            return batch, 0
        removed.extend(batch.offsets[i] for i in drop)
        return batch_without(batch, set(drop)), len(drop)

    buffer.remove(partition, cut)
    kept: deque[Message] = deque()
    for message in current:
        if message.partition == partition and after_nack(message.event.slot, message.offset):
            removed.append(message.offset)
        else:
            kept.append(message)
    return kept, removed


def partition_dropped(buffer: FetchBuffer[ReceivedBatch], current: deque[Message],
                      partition: int) -> deque[Message]:
    """Take every event of `partition` out of the buffered batches and of the messages
    not handed out yet (`current`): the subscription was moved there (`Seeked`), so
    they are from the old position. Their permits come back; the messages kept."""
    buffer.remove(partition, lambda batch: (None, batch.count))
    kept = deque(m for m in current if m.partition != partition)
    buffer.count_taken(partition, len(current) - len(kept))
    return kept
