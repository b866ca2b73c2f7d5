"""The keybus DataFrame schema and the Record -> Arrow conversion.

Rules:
1. One row per event. The primary key has two views: `key_long` when the
   key is an int64, `key_string` when it is a string (the other is null),
   following the EventBatch key rule (`sdk.core.columns`).
2. `ordering_key`, `source` and `event_time` are null when the event has
   none; `opcode` is "UPSERT" or "DELETE"; `headers` (a map of string to
   binary, null when empty) is there only with includeHeaders=true, last,
   as in Spark's Kafka connector.
3. Conversion works on the columns of the wire's EventBatch: per-event
   columns go to Arrow in one call per column and response; broadcast
   columns and per-record values (topic, partition, scn of a window,
   publish time) become repeated Arrow arrays. No Python object is made per
   event except for headers.

Runs inside Spark tasks (read()); must not open connections.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sdk.core.columns import batch_slots
from sdk.core.pb import keybus_pb2 as pb

OPCODE_NAMES = ("UPSERT", "DELETE")

_FIELDS = [
    StructField("key_string", StringType(), True),
    StructField("key_long", LongType(), True),
    StructField("ordering_key", StringType(), True),
    StructField("source", StringType(), True),
    StructField("opcode", StringType(), False),
    StructField("value", BinaryType(), False),
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("offset", LongType(), False),
    StructField("scn", LongType(), False),
    StructField("slot", IntegerType(), False),
    StructField("publish_time", TimestampType(), False),
    StructField("event_time", TimestampType(), True),
]
HEADERS_FIELD = StructField("headers", MapType(StringType(), BinaryType(), True), True)

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_MAP = pa.map_(pa.string(), pa.binary())
_IOTA = pa.array(range(1 << 16), pa.int64())  # 0, 1, 2, ...: offsets without a Python loop
_OPCODES = pa.array(OPCODE_NAMES, pa.string())


def spark_schema(include_headers: bool) -> StructType:
    """The DataFrame schema of a keybus read."""
    return StructType([*_FIELDS, HEADERS_FIELD] if include_headers else list(_FIELDS))


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema PySpark expects for `schema` (it compares them exactly)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def records_to_batch(records: Sequence[pb.Record], schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow RecordBatch holding every event of `records`, in order (rules 1-3)."""
    include_headers = schema.names[-1] == "headers"
    parts: dict[str, list[pa.Array]] = {
        name: [] for name in schema.names if name not in ("value", "slot")}
    values: list[bytes] = []
    slots: list[int] = []
    for record in records:
        batch = record.batch
        n = batch.count
        if n == 0:
            continue
        values.extend(batch.values)
        slots.extend(batch.slots if len(batch.slots) == n else batch_slots(batch))
        _add_keys(parts, batch, n)
        parts["ordering_key"].append(_optional_strings(batch.ordering_keys, n))
        parts["source"].append(_optional_strings(batch.sources, n))
        parts["opcode"].append(_opcodes(batch.opcodes, n))
        _add_positions(parts, record, n)
        parts["event_time"].append(_event_times(batch.event_times_ms, n))
        if include_headers:
            parts["headers"].append(_headers(batch.headers, n))
    columns = {name: _concat(arrays, schema.field(name).type) for name, arrays in parts.items()}
    columns["value"] = pa.array(values, pa.binary())
    columns["slot"] = pa.array(slots, pa.int32())
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


def _concat(arrays: list[pa.Array], kind: pa.DataType) -> pa.Array:
    if not arrays:
        return pa.array([], kind)
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _add_keys(parts: dict[str, list[pa.Array]], batch: pb.EventBatch, n: int) -> None:
    strings, ints = batch.key_strings, batch.key_ints
    if not strings:
        parts["key_long"].append(pa.array(ints, pa.int64()))
        parts["key_string"].append(pa.nulls(n, pa.string()))
    elif not ints:
        parts["key_string"].append(pa.array(strings, pa.string()))
        parts["key_long"].append(pa.nulls(n, pa.int64()))
    else:  # both: the string where it is non-empty, else the int
        text = pa.array(strings, pa.string())
        empty = pc.equal(text, "")
        parts["key_string"].append(pc.if_else(empty, pa.scalar(None, pa.string()), text))
        parts["key_long"].append(pc.if_else(empty, pa.array(ints, pa.int64()),
                                            pa.scalar(None, pa.int64())))


def _optional_strings(column: Sequence[str], n: int) -> pa.Array:
    """A broadcast string column with "" as null."""
    if not column or (len(column) == 1 and not column[0]):
        return pa.nulls(n, pa.string())
    if len(column) == 1:
        return pa.repeat(pa.scalar(column[0], pa.string()), n)
    text = pa.array(column, pa.string())
    return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)


def _opcodes(column: Sequence[int], n: int) -> pa.Array:
    if len(column) <= 1:
        code = column[0] if column else pb.UPSERT
        return pa.repeat(pa.scalar(_opcode_name(code), pa.string()), n)
    if max(column) < len(OPCODE_NAMES):
        return pc.take(_OPCODES, pa.array(column, pa.int32()))
    return pa.array([_opcode_name(c) for c in column], pa.string())


def _opcode_name(code: int) -> str:
    return OPCODE_NAMES[code] if 0 <= code < len(OPCODE_NAMES) else str(code)


def _add_positions(parts: dict[str, list[pa.Array]], record: pb.Record, n: int) -> None:
    """topic, partition, offset, scn and publish_time of a record's events."""
    if record.offsets:
        offsets = pa.array(record.offsets, pa.int64())
    elif n <= len(_IOTA):
        offsets = pc.add(_IOTA.slice(0, n), pa.scalar(record.base_offset, pa.int64()))
    else:
        offsets = pa.array(range(record.base_offset, record.base_offset + n), pa.int64())
    parts["offset"].append(offsets)
    if record.scns:  # a bootstrap snapshot: each event's original SCN and publish time
        parts["scn"].append(pa.array(record.scns, pa.int64()))
    elif record.window:
        parts["scn"].append(pa.repeat(pa.scalar(record.scn_first, pa.int64()), n))
    else:
        delta = record.scn_first - record.base_offset
        parts["scn"].append(pc.add(offsets, pa.scalar(delta, pa.int64())))
    parts["topic"].append(pa.repeat(pa.scalar(record.topic, pa.string()), n))
    parts["partition"].append(pa.repeat(pa.scalar(record.partition, pa.int32()), n))
    if record.publish_times_ms:
        micros = pc.multiply(pa.array(record.publish_times_ms, pa.int64()), 1000)
        parts["publish_time"].append(micros.cast(_TIMESTAMP))
        return
    published = pa.scalar(record.publish_time_ms * 1000, _TIMESTAMP)
    parts["publish_time"].append(pa.repeat(published, n))


def _event_times(column: Sequence[int], n: int) -> pa.Array:
    """Milliseconds to timestamps; 0 (unset) is null."""
    if not column or (len(column) == 1 and not column[0]):
        return pa.nulls(n, _TIMESTAMP)
    if len(column) == 1:
        return pa.repeat(pa.scalar(column[0] * 1000, _TIMESTAMP), n)
    millis = pa.array(column, pa.int64())
    micros = pc.multiply(millis, pa.scalar(1000, pa.int64())).cast(_TIMESTAMP)
    return pc.if_else(pc.equal(millis, 0), pa.scalar(None, _TIMESTAMP), micros)


def _headers(column: Sequence[pb.Headers], n: int) -> pa.Array:
    if not column:
        return pa.nulls(n, _MAP)
    if len(column) == 1:
        entries = list(column[0].entries.items()) or None
        return pa.array([entries] * n, _MAP)
    return pa.array([list(h.entries.items()) or None for h in column], _MAP)
