"""Sparse records (a compacted topic's rewritten head) in the dense shape. Pure.

A sparse record keeps the span of offsets it had (`count` in the log
header) but holds only the events compaction kept, with an `offsets` column.
Code that works by position inside a dense record (the subscription
dispatcher) reads it through `densify`: a record of `span` events where the
positions compaction removed hold empty placeholders, plus the positions
that hold real events. The placeholders must never be sent: callers treat
them as filtered out.
"""

from __future__ import annotations

from sdk.core.columns import OPTIONAL_COLUMNS, expand
from sdk.core.pb import keybus_pb2 as pb


def densify(record: pb.Record, span: int) -> tuple[pb.Record, list[int]]:
    """The dense form of a sparse record and the positions of its real events."""
    batch = record.batch
    count = batch.count
    positions = [offset - record.base_offset for offset in record.offsets]
    assert len(positions) == count and all(0 <= p < span for p in positions), "sparse record"
    dense = pb.Record(topic=record.topic, partition=record.partition,
                      base_offset=record.base_offset, scn_first=record.scn_first,
                      window=record.window, publish_time_ms=record.publish_time_ms)
    out = dense.batch
    out.count = span
    _spread(out.values, list(batch.values), positions, span, b"")
    if batch.key_strings:
        _spread(out.key_strings, expand(batch.key_strings, count, ""), positions, span, "0")
    if batch.key_ints:
        _spread(out.key_ints, list(batch.key_ints), positions, span, 0)
    for name in OPTIONAL_COLUMNS:
        column = getattr(batch, name)
        if len(column) == 1:
            getattr(out, name).append(column[0])
        elif column:
            _spread(getattr(out, name), list(column), positions, span,
                    type(column[0])() if name != "headers" else pb.Headers())
    return dense, positions


def _spread(target: object, values: list[object], positions: list[int], span: int,
            filler: object) -> None:
    """target.extend(values placed at positions, filler elsewhere)."""
    column: list[object] = [filler] * span
    for position, value in zip(positions, values, strict=True):
        column[position] = value
    target.extend(column)  # type: ignore[attr-defined]
