"""What a Spark task runs: read one split into Arrow batches (on an executor).

The driver checked the split's offsets when it planned the batch
(partitioning.plan_stream_batch); what changes after that is found here, from
the broker's answer, and told apart (`_client.Failure`) as Kafka's source
tells them apart in its task:
* retention removed offsets of the split: data loss; failOnDataLoss=false
  reads on from the earliest stored offset.
* the split's offsets went back (the read's start is past the log's end: the
  topic was deleted and created again; or a cluster broker truncated its log):
  data loss; false skips the rest of the split with a warning (Kafka skips
  [offset, untilOffset)), and the next batch's planning goes on from the new
  end. Never read from the start of the new log: its events are not the ones
  these offsets named.
* the topic was deleted: data loss; false skips the rest of the split with a
  warning (the next batch's planning drops the topic until it comes back).
Anything else fails the task as it is. Records received before a failure go
to Spark first (they did arrive).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from sdk.core.columns import record_next_offset
from sdk.core.model import HashRange
from sdk.core.pb import keybus_pb2 as pb
from sdk.security import ClientSecurity
from spark_connector import _client
from spark_connector._client import Failure
from spark_connector.partitioning import DataLossError, Split
from spark_connector.schema import records_to_batch
from spark_connector.snapshot import snapshot_records

_log = logging.getLogger("keybus.spark")

_NEW_CHECKPOINT = ("or start the query with a new checkpointLocation to read the topic again "
                   "from startingOffsets")


class KeybusInputPartition(InputPartition):
    """Everything one task needs to read one split (pickled to an executor)."""

    def __init__(self, split: Split, broker: str, key_filter: bytes | None,
                 events_max: int, fail_on_data_loss: bool,
                 security: ClientSecurity | None = None) -> None:
        super().__init__(None)
        self.split = split
        self.broker = broker
        self.security = security
        self.key_filter = key_filter
        self.events_max = events_max
        self.fail_on_data_loss = fail_on_data_loss

    def read_args(self) -> tuple[pb.KeyFilter | None, Sequence[HashRange] | None]:
        """The key filter and hash ranges to read with (None: every slot)."""
        key_filter = None if self.key_filter is None else pb.KeyFilter.FromString(self.key_filter)
        return key_filter, None if self.split.full_range else self.split.ranges


def read_split(partition: KeybusInputPartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one split's events, each of about events_max events.

    Records are gathered until they hold events_max events, so a topic
    written in small produce batches still gives Spark large Arrow batches.
    A failed read is answered as the module docstring says.

    Raises:
        DataLossError: events of the split are gone (retention, offsets that
            went back, a deleted topic) and failOnDataLoss is true.
        BrokerCallError: the read failed for another reason.
    """
    split = partition.split
    key_filter, ranges = partition.read_args()
    reached = split.start  # the offset after the last record received

    def records(start: int | str) -> Iterator[pb.Record]:
        nonlocal reached
        for record in _client.read_records(partition.broker, split.topic, split.partition,
                                           start, split.stop, ranges, key_filter,
                                           partition.events_max, partition.security):
            reached = max(reached, record_next_offset(record))
            yield record

    try:
        yield from _coalesced(records(split.start), partition.events_max, schema)
    except _client.BrokerCallError as e:
        where = (f"{split.topic}/{split.partition}: events from offset {reached} on, which "
                 f"this task read (offsets {split.start}..{split.stop - 1}),")
        if e.failure == Failure.RETENTION:
            if partition.fail_on_data_loss:
                raise DataLossError(
                    f"{where} are no longer stored: {e}. Set failOnDataLoss=false to skip the "
                    "events that are gone and go on") from None
            yield from _coalesced(records("earliest"), partition.events_max, schema)
            return
        skipped = _skip_lost(e, where, partition.fail_on_data_loss)
        _log.warning("%s; skipped (failOnDataLoss=false)", skipped)


def _skip_lost(error: _client.BrokerCallError, where: str, fail_on_data_loss: bool) -> str:
    """What a read that lost its offsets (they went back, or the topic is gone) skips,
    in words; raise instead when that is not data loss or failOnDataLoss is true.

    Raises:
        DataLossError: the offsets are gone and fail_on_data_loss is true.
        BrokerCallError: `error`, for any other failure.
    """
    if error.failure in (Failure.PAST_END, Failure.TRUNCATED):
        what = (f"{where} are gone: the partition's offsets went back since the batch was "
                "planned (the topic was deleted and created again, or its log was truncated), "
                "so they now name other events or none")
    elif error.failure == Failure.TOPIC_GONE:
        what = f"{where} are gone: the topic was deleted while the query ran"
    else:
        raise error
    if fail_on_data_loss:
        raise DataLossError(f"{what} ({error}). Set failOnDataLoss=false to skip them and go on, "
                            f"{_NEW_CHECKPOINT}") from None
    return f"{what} ({error})"


def _coalesced(records: Iterator[pb.Record], events_max: int,
               schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Records gathered into batches of about events_max events; what was gathered
    when the read fails goes out before the error (it did arrive)."""
    pending: list[pb.Record] = []
    events = 0
    try:
        for record in records:
            pending.append(record)
            events += record.batch.count
            if events >= events_max:
                yield records_to_batch(pending, schema)
                pending, events = [], 0
    except _client.BrokerCallError:
        if pending:
            yield records_to_batch(pending, schema)
        raise
    if pending:
        yield records_to_batch(pending, schema)


class KeybusSnapshotPartition(KeybusInputPartition):
    """A split that reads its partition's compacted view (startingOffsets=snapshot):
    batch (snapshot_offset None) the view now; streaming the view as of
    snapshot_offset, then the log up to the split's stop."""

    def __init__(self, split: Split, broker: str, key_filter: bytes | None, events_max: int,
                 fail_on_data_loss: bool, snapshot_offset: int | None,
                 security: ClientSecurity | None = None) -> None:
        super().__init__(split, broker, key_filter, events_max, fail_on_data_loss, security)
        self.snapshot_offset = snapshot_offset


def read_snapshot_split(partition: KeybusSnapshotPartition,
                        schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Arrow batches of a snapshot split (see spark_connector/snapshot.py).

    Raises:
        DataLossError: the log the snapshot's catch-up needs is gone and
            failOnDataLoss is true (false: a new snapshot is read instead,
            which may repeat or skip events around it); or (streaming) the
            split's offsets went back or its topic was deleted since the
            batch was planned and failOnDataLoss is true (false: skipped).
    """
    split = partition.split
    key_filter, ranges = partition.read_args()

    def records(snapshot_offset: int | None) -> Iterator[pb.Record]:
        return snapshot_records(partition.broker, split.topic, split.partition, ranges,
                                key_filter, partition.events_max, snapshot_offset, split.stop,
                                partition.security)

    try:
        yield from _coalesced(records(partition.snapshot_offset), partition.events_max, schema)
    except _client.BrokerCallError as e:
        if partition.snapshot_offset is None:
            raise
        if e.failure != Failure.RETENTION:
            where = (f"{split.topic}/{split.partition}: the snapshot as of offset "
                     f"{partition.snapshot_offset} and the log up to offset {split.stop}")
            _log.warning("%s; skipped (failOnDataLoss=false)",
                         _skip_lost(e, where, partition.fail_on_data_loss))
            return
        if partition.fail_on_data_loss:
            raise DataLossError(f"{e}. Set failOnDataLoss=false to read a new snapshot "
                                "instead") from None
        yield from _coalesced(records(None), partition.events_max, schema)
