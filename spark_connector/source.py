"""The keybus data source: Spark glue over `partitioning`, `pushdown`, `schema`.

* `KeybusDataSource` ("keybus") validates options when the DataFrame is
  defined and hands out readers and writers.
* `KeybusBatchReader`: one input partition per (topic partition, hash range)
  over [startingOffsets, endingOffsets); filter pushdown per `pushdown.py`.
* `KeybusStreamReader`: offsets per topic partition live in Spark's
  checkpoint; `latestOffset(start, limit)` admits at most maxEventsPerTrigger
  events split by backlog; Trigger.AvailableNow stops at the offsets seen
  when the query started. The offsets name each topic's incarnation, so a
  topic deleted and created again is noticed even when its new log has grown
  past them (incarnation.py).

Readers are pickled to executors: `read()` opens its own connection (an SDK
SyncReader) and closes it when the split is done. partitions() and
latestOffset() run on the driver and ask the broker for the partitions'
offsets each time (partitions() reuses latestOffset's answer for the batch
it planned), and check the batch's offsets against them (data loss).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from sdk.core.filters import KeyFilterSpec
from sdk.core.model import HashRange, TopicPartition
from spark_connector import _client
from spark_connector.incarnation import (
    drop_topics,
    incarnations_of,
    recreated,
    recreated_problems,
    report_recreated,
    split_incarnations,
    with_incarnations,
)
from spark_connector.options import (
    OptionError,
    Pushdown,
    ReadOptions,
    Use,
    parse_read_options,
    parse_write_options,
)
from spark_connector.partitioning import (
    DataLossError,
    PartitionBounds,
    Split,
    check_data_loss,
    limit_offsets,
    moved_back,
    offsets_from_json,
    offsets_moved_back,
    offsets_to_json,
    plan_splits,
    plan_stream_batch,
    range_groups,
    report_moved_back,
    resolve_offsets,
    resolve_ranges,
)
from spark_connector.pushdown import GUARD, Condition, PushdownPlan, apply_pushdown, plan_pushdown
from spark_connector.schema import arrow_schema, spark_schema
from spark_connector.snapshot import (
    SNAPSHOT_CONTEXT,
    mark_snapshot,
    snapshot_starts,
    split_snapshot_mark,
    view_offsets,
)
from spark_connector.task_read import (
    KeybusInputPartition,
    KeybusSnapshotPartition,
    read_snapshot_split,
    read_split,
)
from spark_connector.writer import KeybusBatchWriter, KeybusStreamWriter

_log = logging.getLogger("keybus.spark")


class KeybusDataSource(DataSource):
    """spark.read / readStream / write / writeStream .format("keybus")."""

    @classmethod
    def name(cls) -> str:
        return "keybus"

    def schema(self) -> StructType:
        # Called when a read is defined (load()): check the options now, for
        # either kind of read; reader()/streamReader() check them for their use.
        options = parse_read_options(self.options, Use.READ)
        resolve_ranges(options.ranges)
        return spark_schema(options.include_headers)

    def reader(self, schema: StructType) -> KeybusBatchReader:
        options = parse_read_options(self.options, Use.BATCH_READ)
        if options.pushdown is Pushdown.GUARDED:
            return KeybusPushdownReader(options, schema)
        return KeybusBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> KeybusStreamReader:
        return KeybusStreamReader(parse_read_options(self.options, Use.STREAM_READ), schema)

    def writer(self, schema: StructType, overwrite: bool) -> KeybusBatchWriter:
        _refuse_overwrite(overwrite)
        return KeybusBatchWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KeybusStreamWriter:
        _refuse_overwrite(overwrite)
        return KeybusStreamWriter(parse_write_options(self.options), schema)


def _range_groups(options: ReadOptions, partitions: list[TopicPartition]
                  ) -> dict[TopicPartition, list[list[HashRange]]]:
    """Range groups per topic partition; asks the broker for subscription:NAME."""
    spec = options.ranges
    live = None
    if spec.subscription is not None:
        present = sorted({tp.topic for tp in partitions})  # not a topic deleted meanwhile
        live = _client.subscription_ranges(options.broker, present, spec.subscription,
                                           options.security)
    return range_groups(spec, partitions, live)


def _scn_offsets(options: ReadOptions, bounds: dict[TopicPartition, PartitionBounds]
                 ) -> dict[TopicPartition, int]:
    """The offsets of startingOffsets' {"scn": N} entries (the broker resolves them);
    asks nothing when there are none, or for a partition `bounds` lacks (refused next)."""
    scns = [(tp, scn) for tp, scn in options.starting.scns if tp in bounds]
    if not scns:
        return {}
    return _client.offsets_for_scns(options.broker, scns, bounds, options.security)


def _refuse_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise OptionError("a keybus topic is an append-only log: use mode 'append' "
                          "(mode 'overwrite' would need to delete events)")


def _check_schema(schema: StructType, options: ReadOptions) -> pa.Schema:
    expected = spark_schema(options.include_headers)
    if schema.fieldNames() != expected.fieldNames():
        raise OptionError(f"a keybus read has a fixed schema ({expected.simpleString()}); got "
                          f"{schema.simpleString()}: do not set .schema(...), and use "
                          "includeHeaders=true for the headers column")
    return arrow_schema(schema)


def _input_partitions(splits: Sequence[Split], options: ReadOptions,
                      key_filter: KeyFilterSpec | None, incarnations: dict[str, str]
                      ) -> list[KeybusInputPartition]:
    """One input partition per split; each reads with its topic's incarnation as
    planned (`incarnations`), so a topic made again since is refused, not read."""
    chosen = options.key_filter or key_filter
    filter_bytes = None if chosen is None else chosen.to_proto().SerializeToString()
    return [KeybusInputPartition(s, options.broker, filter_bytes, options.events_per_response_max,
                                 options.fail_on_data_loss, options.security,
                                 incarnations.get(s.topic)) for s in splits]


def _snapshot_partitions(options: ReadOptions, offsets: dict[TopicPartition, int],
                         stops: dict[TopicPartition, int] | None, incarnations: dict[str, str]
                         ) -> list[KeybusSnapshotPartition]:
    """One snapshot split per topic partition and range group (every partition:
    a snapshot is read even when the log has nothing new); each reads with its
    topic's incarnation as planned, as log splits do (`_input_partitions`)."""
    groups = _range_groups(options, list(offsets))
    chosen = options.key_filter
    filter_bytes = None if chosen is None else chosen.to_proto().SerializeToString()
    out = []
    for tp in sorted(offsets):
        stop = offsets[tp] if stops is None else stops.get(tp, offsets[tp])
        for group in groups[tp]:
            split = Split(tp.topic, tp.partition, tuple(group), offsets[tp], stop)
            out.append(KeybusSnapshotPartition(
                split, options.broker, filter_bytes, options.events_per_response_max,
                options.fail_on_data_loss, None if stops is None else offsets[tp],
                options.security, incarnations.get(tp.topic)))
    return out


# ---------------------------------------------------------------- batch


_COMPARISON_OPS: dict[type[Filter], str] = {
    EqualTo: "=", EqualNullSafe: "=", GreaterThan: ">", GreaterThanOrEqual: ">=",
    LessThan: "<", LessThanOrEqual: "<=",
}


def condition_of(spark_filter: Filter) -> Condition | None:
    """A Spark filter as a pushdown Condition; None when pushdown cannot use it."""
    attribute: tuple[str, ...] = getattr(spark_filter, "attribute", ())
    if len(attribute) != 1:
        return None
    column = attribute[0]
    if isinstance(spark_filter, In):
        return Condition(column, "in", tuple(v for v in spark_filter.value if v is not None))
    op = _COMPARISON_OPS.get(type(spark_filter))
    value = getattr(spark_filter, "value", None)
    if op is None or value is None:
        return None
    return Condition(column, op, (value,))


class KeybusBatchReader(DataSourceReader):
    """Batch read of [startingOffsets, endingOffsets) per topic partition."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.arrow_schema = _check_schema(schema, options)
        self.plan = PushdownPlan()

    def partitions(self) -> list[KeybusInputPartition]:
        options = self.options
        if options.snapshot:
            offsets, incarnations = view_offsets(options.broker, options.topics,
                                                 options.security)
            return list(_snapshot_partitions(options, offsets, None, incarnations))
        bounds = _client.describe(options.broker, options.topics, options.security)
        starts = resolve_offsets(options.starting, bounds, "startingOffsets",
                                 _scn_offsets(options, bounds))
        stops = resolve_offsets(options.ending, bounds, "endingOffsets")
        for tp, stop in stops.items():
            if starts[tp] > stop:
                raise OptionError(f"{tp.topic}/{tp.partition}: startingOffsets {starts[tp]} is "
                                  f"after endingOffsets {stop}")
            stops[tp] = min(stop, bounds[tp].end_offset)
        starts = check_data_loss(starts, bounds, options.fail_on_data_loss)
        splits = plan_splits(starts, stops, _range_groups(options, list(bounds)))
        splits = apply_pushdown(splits, self.plan)
        return _input_partitions(splits, options, self.plan.key_filter, incarnations_of(bounds))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, KeybusSnapshotPartition):
            return read_snapshot_split(partition, self.arrow_schema)
        if not isinstance(partition, KeybusInputPartition):
            return iter(())  # PySpark's stand-in when partitions() found nothing to read
        return read_split(partition, self.arrow_schema)


class KeybusPushdownReader(KeybusBatchReader):
    """A batch reader that narrows its read by the query's conditions (pushdown=guarded).

    A separate class because PySpark refuses a reader that defines pushFilters
    when spark.sql.python.filterPushdown.enabled is false.
    """

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Narrow the read (pushdown.py); every filter except the guard goes back to Spark.

        Narrows only when the guard `offset >= 0` is among the filters, which
        every query on a spark_connector.load() DataFrame carries.
        """
        conditions = [condition_of(f) for f in filters]
        self.plan = plan_pushdown([c for c in conditions if c is not None])
        # The guard is exact (every offset is >= 0): Spark need not check it again.
        return [f for f, c in zip(filters, conditions, strict=True) if c != GUARD]


# ---------------------------------------------------------------- streaming


class KeybusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads; offsets {topic: {partition: next offset}} in the checkpoint."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.arrow_schema = _check_schema(schema, options)
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow
        self._latest: dict[TopicPartition, int] | None = None
        self._planned_bounds: dict[TopicPartition, PartitionBounds] | None = None

    def _bounds(self, missing_ok: bool = True) -> dict[TopicPartition, PartitionBounds]:
        """The partitions' offsets now. missing_ok: a deleted topic has no partitions
        (data loss, judged by the caller), as for Kafka's source; only the query's
        first offsets (initialOffset) need every topic to exist."""
        return _client.describe(self.options.broker, self.options.topics, self.options.security,
                                missing_ok=missing_ok, unreachable_wait_s=(
                                    _client.STREAM_UNREACHABLE_WAIT_S if missing_ok else 0.0))

    def _durable_ends(self, reached: dict[TopicPartition, int],
                      bounds: dict[TopicPartition, PartitionBounds]) -> dict[TopicPartition, int]:
        """The partitions' durable log ends, asked (DescribeCluster) only when an end
        is below what the query reached: moved back, or only held back (see
        partitioning.moved_back)."""
        if not moved_back(reached, {tp: b.end_offset for tp, b in bounds.items()}):
            return {}
        return _client.durable_ends(self.options.broker, self.options.topics,
                                    self.options.security)

    def initialOffset(self) -> dict[str, dict[str, int]]:
        if self.options.snapshot:  # the first batch reads the view as of these offsets
            offsets, incarnations = view_offsets(self.options.broker, self.options.topics,
                                                 self.options.security)
            return mark_snapshot(with_incarnations(offsets_to_json(offsets), incarnations))
        bounds = self._bounds(missing_ok=False)
        starts = resolve_offsets(self.options.starting, bounds, "startingOffsets",
                                 _scn_offsets(self.options, bounds))
        return with_incarnations(offsets_to_json(starts), incarnations_of(bounds))

    def getDefaultReadLimit(self) -> ReadLimit:
        events_max = self.options.max_events_per_trigger
        return ReadAllAvailable() if events_max is None else ReadMaxRows(events_max)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {tp: b.end_offset for tp, b in self._bounds().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit
                     ) -> dict[str, dict[str, int]]:
        bounds = self._bounds()
        self._planned_bounds = bounds  # for partitions() of the batch this plans
        plain, checkpointed = split_incarnations(start)
        starts = offsets_from_json(split_snapshot_mark(plain)[0])
        current = incarnations_of(bounds)
        # A topic deleted and created again (another incarnation than the checkpoint's):
        # fail now with failOnDataLoss=true; else its partitions are new to the query,
        # read from their start (incarnation.py, rule 1), whatever their offsets now.
        changed = recreated(checkpointed, current)
        for warning in report_recreated(recreated_problems(changed, starts),
                                        self.options.fail_on_data_loss):
            _log.warning("%s", warning)
        starts = drop_topics(starts, changed)
        latest = {tp: b.end_offset for tp, b in bounds.items()}
        # Offsets that went back (topic re-created, log truncated): fail now with
        # failOnDataLoss=true; else this batch ends at the new end (partitions()
        # warns) and the next one goes on from there, as Kafka's source does.
        moved = moved_back(starts, latest, self._durable_ends(starts, bounds))
        report_moved_back(offsets_moved_back(starts, moved, {tp.topic for tp in bounds}),
                          self.options.fail_on_data_loss)
        for tp, end in latest.items():
            if starts.get(tp, end) > end:  # moved back: go on from the end; else held back
                starts[tp] = end if tp in moved else starts[tp]
                latest[tp] = starts[tp]
        for tp, b in bounds.items():
            starts.setdefault(tp, b.start_offset)  # a partition new since the last batch
        if self._target is not None:
            latest = {tp: min(end, self._target.get(tp, starts[tp])) for tp, end in latest.items()}
        self._latest = latest
        events_max = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return with_incarnations(offsets_to_json(limit_offsets(starts, latest, events_max)),
                                 current)

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]
                   ) -> list[KeybusInputPartition]:
        plain, snapshot = split_snapshot_mark(start)
        plain, start_incarnations = split_incarnations(plain)
        plain_end, end_incarnations = split_incarnations(end)
        starts, stops = offsets_from_json(plain), offsets_from_json(plain_end)
        # The bounds latestOffset just asked for; a batch re-run after a restart asks.
        planned, self._planned_bounds = self._planned_bounds, None
        bounds = planned or self._bounds()
        starts, stops = self._check_incarnations(starts, stops, start_incarnations,
                                                 end_incarnations, bounds)
        for tp in stops:
            starts.setdefault(tp, bounds[tp].start_offset if tp in bounds else stops[tp])
        if snapshot:  # checked like any batch, at the offsets the snapshot is read as of
            starts = snapshot_starts(starts, stops)
        reached = {tp: max(start, stops.get(tp, start)) for tp, start in starts.items()}
        try:
            starts, stops, warnings = plan_stream_batch(starts, stops, bounds,
                                                        self.options.fail_on_data_loss,
                                                        self._durable_ends(reached, bounds))
        except DataLossError as e:
            raise DataLossError(f"{SNAPSHOT_CONTEXT}{e}" if snapshot else str(e)) from None
        for warning in warnings:
            _log.warning("%s%s", SNAPSHOT_CONTEXT if snapshot else "", warning)
        if snapshot:
            return list(_snapshot_partitions(self.options, starts, stops,
                                             incarnations_of(bounds)))
        splits = plan_splits(starts, stops, _range_groups(self.options, list(stops)))
        return _input_partitions(splits, self.options, None, incarnations_of(bounds))

    def _check_incarnations(self, starts: dict[TopicPartition, int],
                            stops: dict[TopicPartition, int], start_incarnations: dict[str, str],
                            end_incarnations: dict[str, str],
                            bounds: dict[TopicPartition, PartitionBounds]
                            ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """The batch's offsets after incarnation.py's rule 2.

        A topic latestOffset found made again (start and end of other incarnations)
        is read from its start: its partitions leave `starts`. One made again since
        the batch was planned (end and DescribeTopic differ) is data loss; with
        failOnDataLoss=false nothing of it is read now, and the next batch's
        latestOffset reads the new topic from its start and logs the warning.

        Raises:
            DataLossError: a topic was made again since the batch was planned and
                failOnDataLoss is true.
        """
        renewed = recreated(start_incarnations, end_incarnations)
        since = recreated(end_incarnations, incarnations_of(bounds))
        report_recreated(recreated_problems(since, stops), self.options.fail_on_data_loss)
        return drop_topics(starts, renewed.keys() | since.keys()), drop_topics(stops, since)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, KeybusSnapshotPartition):
            return read_snapshot_split(partition, self.arrow_schema)
        if not isinstance(partition, KeybusInputPartition):
            return iter(())  # PySpark's stand-in when partitions() found nothing to read
        return read_split(partition, self.arrow_schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: Spark's checkpoint holds the offsets; the broker keeps no cursor."""


