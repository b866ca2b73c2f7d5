"""df.write / df.writeStream .format("keybus"): rows -> columnar batches -> the SDK producer.

Input columns (by name; others are ignored, so a keybus read can be
written back as it is):
* `value` (binary or string; required; null = empty bytes);
* the key: `key_long` (integer) and/or `key_string` (string), or `key`
  (integer or string); a row's key is its non-empty string, else its integer;
* optional `ordering_key`, `source`, `opcode` ("UPSERT"/"DELETE" or 0/1),
  `headers` (map of string to binary or string), `event_time` (timestamp),
  `partition` (the target partition; default slot % partitions) and `topic`
  (needed when the `topic` option is not set).

Guarantee (see docs/spark.md, "Writing"): a task's batches go out through
`sdk.producer.Producer` under a producer id that every attempt of that task
shares (`task_producer.py`), so
a retried task or a re-run micro-batch stores nothing twice as long as it
produces the same batches; where it does not, the connector falls back to
re-sending (at-least-once), never to dropping. Commit and abort keep no state:
everything a task wrote is stored when its write() returns.

write() runs in Spark tasks; writer()/streamWriter() run on the driver.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegralType,
    MapType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sdk.core.hashing import partition_of, slots_of
from sdk.core.pb import keybus_pb2 as pb
from spark_connector import _client
from spark_connector.options import OptionError, WriteIdempotence, WriteOptions
from spark_connector.task_producer import (
    EventColumns,
    TaskProducer,
    WriteStats,
    task_producer_id,
)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

_KEY_TYPES = {"key_long": "an integer type", "key_string": "string", "key": "integer or string"}
_OPCODES = {"UPSERT": pb.UPSERT, "DELETE": pb.DELETE}


@dataclass
class KeybusCommitMessage(WriterCommitMessage):
    """What one task wrote (for logs and tests; commit keeps nothing)."""

    stats: WriteStats = field(default_factory=WriteStats)


def check_input_schema(schema: StructType, options: WriteOptions) -> None:
    """Fail at once, on the driver, when the rows cannot become events.

    Raises:
        OptionError: naming the column and the allowed types.
    """
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("a keybus write needs a 'value' column (binary or string); the "
                          f"DataFrame has {', '.join(fields) or 'no columns'}")
    if not any(name in fields for name in _KEY_TYPES):
        raise OptionError("a keybus write needs a key column: key_long (integer), "
                          "key_string (string) or key (integer or string)")
    if options.topic is None and "topic" not in fields:
        raise OptionError("a keybus write needs option 'topic' or a 'topic' column")
    expected: dict[str, tuple[str, tuple[type[DataType], ...]]] = {
        "value": ("binary or string", (BinaryType, StringType)),
        "key_long": ("an integer type", (IntegralType,)),
        "key_string": ("string", (StringType,)),
        "key": ("integer or string", (IntegralType, StringType)),
        "ordering_key": ("string or integer", (StringType, IntegralType)),
        "source": ("string", (StringType,)),
        "opcode": ("string or integer", (StringType, IntegralType)),
        "headers": ("map<string, binary or string>", (MapType,)),
        "event_time": ("timestamp", (TimestampType, TimestampNTZType)),
        "partition": ("an integer type", (IntegralType,)),
        "topic": ("string", (StringType,)),
    }
    for name, (text, kinds) in expected.items():
        kind = fields.get(name)
        if kind is not None and not (isinstance(kind, kinds) and _inner_types_fit(kind)):
            raise OptionError(f"column {name!r} has type {kind.simpleString()}; "
                              f"a keybus write needs {text}")


def _inner_types_fit(kind: DataType) -> bool:
    """A map column (headers) needs string keys and binary or string values: the
    SDK takes nothing else, and a task would fail on its first row, after the
    rows before it were stored, instead of the write failing at save()."""
    if not isinstance(kind, MapType):
        return True
    return (isinstance(kind.keyType, StringType)
            and isinstance(kind.valueType, (BinaryType, StringType)))


class _WriterBase:
    def __init__(self, options: WriteOptions, schema: StructType, write_id: str | None) -> None:
        check_input_schema(schema, options)
        if options.topic is not None:
            # On the driver, once: a wrong address or a missing topic fails the
            # write here, at once, rather than in every task (which waits for a
            # broker it cannot reach: task_producer.py, rule 5).
            _client.describe(options.broker, [options.topic], options.security)
        self.options = options
        self.write_id = write_id

    def _producer_id(self) -> int | None:
        """Rule 1 of task_producer.py; None = a fresh id per attempt."""
        if self.options.idempotence is WriteIdempotence.ATTEMPT:
            return None
        context = TaskContext.get()
        write_id = self.write_id
        if write_id is None and context is not None:  # streaming: query id + micro-batch id
            query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
            batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
            if query_id and batch_id:
                write_id = f"{query_id}:{batch_id}"
        if write_id is None or context is None:
            return None
        return task_producer_id(write_id, context.partitionId())

    def _write(self, batches: Iterator[pa.RecordBatch]) -> KeybusCommitMessage:
        options = self.options
        producer = TaskProducer(options.broker, self._producer_id(), options.in_flight_max,
                                options.batch_events_max, options.security)
        router = _Router(options, producer.partitions)
        try:
            for batch in batches:
                for topic, partition, columns in router.add(batch):
                    producer.send(topic, partition, columns)
            for topic, partition, columns in router.flush():
                producer.send(topic, partition, columns)
            stats = producer.finish()
        except BaseException:
            producer.abort()
            raise
        return KeybusCommitMessage(stats)


class KeybusBatchWriter(_WriterBase, DataSourceArrowWriter):
    """Batch write: one producer id per task, shared by its attempts."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        super().__init__(options, schema, uuid.uuid4().hex)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KeybusCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to do: every task's events are stored when its write() returned."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo: the log is append-only (what tasks stored stays)."""


class KeybusStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """Streaming write: the producer id comes from (query id, micro-batch id, task)."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        super().__init__(options, schema, None)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KeybusCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every task's events are stored when its write() returned."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: the log is append-only (what tasks stored stays)."""


# ---------------------------------------------------------------- rows -> batches


@dataclass
class _Pending:
    """Columns of one (topic, partition) not yet sent."""

    keys: list[int | str] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    extras: dict[str, list[Any]] = field(default_factory=dict)


class _Router:
    """Turns Arrow batches of rows into per-(topic, partition) EventColumns.

    Args:
        partitions_of: a topic's partition count (asked once per topic).
    """

    def __init__(self, options: WriteOptions, partitions_of: Callable[[str], int]) -> None:
        self.options = options
        self.pending: dict[tuple[str, int], _Pending] = {}
        self.partitions: dict[str, int] = {}
        self._partitions_of = partitions_of

    def add(self, batch: pa.RecordBatch) -> list[tuple[str, int, EventColumns]]:
        rows = _columns_of(batch)
        topics = rows.pop("topic", None)
        targets = rows.pop("partition", None)
        ready: list[tuple[str, int, EventColumns]] = []
        for i in range(batch.num_rows):
            topic = self.options.topic or (topics[i] if topics else None)
            if not topic:
                raise ValueError(f"row {i} has no topic: set option 'topic' or the 'topic' column")
            partition = self._partition_of(topic, rows["slots"][i], targets[i] if targets else None)
            pending = self.pending.setdefault((topic, partition), _Pending())
            pending.keys.append(rows["keys"][i])
            pending.values.append(rows["values"][i])
            for name, column in rows["extras"].items():
                pending.extras.setdefault(name, []).append(column[i])
            if len(pending.keys) >= self.options.batch_events_max:
                ready.append(self._take(topic, partition))
        return ready

    def flush(self) -> list[tuple[str, int, EventColumns]]:
        return [self._take(topic, partition) for topic, partition in sorted(self.pending)]

    def _take(self, topic: str, partition: int) -> tuple[str, int, EventColumns]:
        pending = self.pending.pop((topic, partition))
        extras = pending.extras
        ordering = extras.get("ordering_keys")
        columns = EventColumns(pending.keys, pending.values, ordering if any(ordering or ()) else None,
                               extras.get("sources"), extras.get("opcodes"),
                               extras.get("headers"), extras.get("event_times_ms"))
        return topic, partition, columns

    def _partition_of(self, topic: str, slot: int, explicit: int | None) -> int:
        count = self.partitions.get(topic)
        if count is None:
            count = self.partitions[topic] = max(self._partitions_of(topic), 1)
        if explicit is None:
            return partition_of(slot, count)
        if not 0 <= explicit < count:
            raise ValueError(f"column 'partition' is {explicit}; topic {topic!r} has partitions "
                             f"0..{count - 1}")
        return int(explicit)


def _columns_of(batch: pa.RecordBatch) -> dict[str, Any]:
    """Python columns of a batch: keys, values, slots, extras, topic, partition."""
    names = set(batch.schema.names)

    def column(name: str) -> list[Any] | None:
        return batch.column(name).to_pylist() if name in names else None

    keys = _keys(column("key_string"), column("key_long"), column("key"), batch.num_rows)
    ordering = [("" if o is None else str(o)) for o in column("ordering_key") or []]
    extras: dict[str, list[Any]] = {}
    if ordering:  # kept even when all empty: a pending batch may span Arrow batches
        extras["ordering_keys"] = ordering
    _add_extras(extras, batch, names)
    return {
        "keys": keys,
        "values": _values(column("value") or []),
        "slots": slots_of([o or k for o, k in zip(ordering, keys, strict=True)]
                          if ordering else keys),
        "extras": extras,
        "topic": column("topic"),
        "partition": column("partition"),
    }


def _keys(strings: list[Any] | None, longs: list[Any] | None, generic: list[Any] | None,
          n: int) -> list[int | str]:
    out: list[int | str] = []
    for i in range(n):
        key = strings[i] if strings else None
        if not key:
            key = longs[i] if longs else None
        if key is None or key == "":
            key = generic[i] if generic else None
        if key is None or key == "":
            raise ValueError(f"row {i} has no key: set key_string, key_long or key")
        out.append(key)
    return out


def _values(column: list[Any]) -> list[bytes]:
    return [b"" if v is None else (v.encode() if isinstance(v, str) else v) for v in column]


def _add_extras(extras: dict[str, list[Any]], batch: pa.RecordBatch, names: set[str]) -> None:
    if "source" in names:
        extras["sources"] = ["" if s is None else s for s in batch.column("source").to_pylist()]
    if "opcode" in names:
        extras["opcodes"] = [_opcode(o) for o in batch.column("opcode").to_pylist()]
    if "event_time" in names:
        micros = batch.column("event_time").cast(pa.int64()).to_pylist()
        extras["event_times_ms"] = [0 if m is None else m // 1000 for m in micros]
    if "headers" in names:
        extras["headers"] = [_headers(h) for h in batch.column("headers").to_pylist()]


def _opcode(value: Any) -> int:
    if value is None:
        return pb.UPSERT
    code = _OPCODES.get(value.upper()) if isinstance(value, str) else value
    if code not in (pb.UPSERT, pb.DELETE):
        raise ValueError(f"column 'opcode' is {value!r}; allowed UPSERT, DELETE, 0 or 1")
    return int(code)


def _headers(entries: list[tuple[str, Any]] | None) -> dict[str, bytes]:
    return {k: (v.encode() if isinstance(v, str) else (v or b"")) for k, v in entries or []}
