"""Records as window pieces: what the runner needs from a record, computed once per window.

A window record (one produce call with `window=True`) is one window; a plain
batch's events are each a window of their own (SCN scn_first + position).
The record's columns become the pieces' payload (`EventColumns`), read
lazily by `DbusEvent`.
"""

from __future__ import annotations

from sdk.core.columns import batch_slots
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus.event import EventColumns
from sdk.databus.window import WindowPiece


def record_pieces(record: pb.Record, need_slots: bool,
                  window_last_offset: int | None = None) -> list[WindowPiece]:
    """The windows of one whole record (or of the part of it delivered to us).

    Args:
        need_slots: the group has more than one member (events split by slot).
        window_last_offset: where the stored window ends, when known (a
            delivery says it); default the record's last offset here.
    """
    columns = EventColumns(record)
    batch = record.batch
    count = batch.count
    slots: list[int] | tuple[()] = batch_slots(batch) if need_slots else ()
    if record.window:
        last = window_last_offset if window_last_offset is not None else \
            columns.offset_at(count - 1)
        size = sum(map(len, batch.values))
        return [WindowPiece(record.partition, record.scn_first, last, range(count),
                            batch.sources, batch.schemas, slots, columns, size)]
    return [WindowPiece(record.partition, columns.scn_at(i), columns.offset_at(i),
                        range(i, i + 1), batch.sources, batch.schemas, slots, columns,
                        len(batch.values[i]))
            for i in range(count)]
