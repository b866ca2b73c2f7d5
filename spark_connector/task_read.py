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
* the topic is another incarnation than the one the batch was planned with
  (the read sends it; spark_connector/incarnation.py): it was deleted and
  created again since, or while the read was away from a lost broker
  (TopicRecreated): data loss, as offsets that went back.
Anything else fails the task as it is. Records received before a failure go
to Spark first (they did arrive).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from sdk.bootstrap import SNAPSHOT, BootstrapPosition
from sdk.core.columns import record_next_offset
from sdk.core.model import HashRange, TopicPartition
from sdk.core.pb import keybus_pb2 as pb
from sdk.security import ClientSecurity
from spark_connector import _client
from spark_connector._client import Failure
from spark_connector.partitioning import DataLossError, Split
from spark_connector.schema import records_to_batch
from spark_connector.snapshot import Progress, past_retention, snapshot_records

_log = logging.getLogger("keybus.spark")

# How often a streaming snapshot read goes on past log that retention removed ahead of
# it before it fails: each time the new read's stream pins its log at once, so a second
# loss needs retention to run again in the moment before that.
RETENTION_RESUMES_MAX = 8
RETENTION_WAIT_S = 0.05  # times the resumes so far, when the log's start has not moved yet

_NEW_CHECKPOINT = ("or start the query with a new checkpointLocation to read the topic again "
                   "from startingOffsets")


class KeybusInputPartition(InputPartition):
    """Everything one task needs to read one split (pickled to an executor)."""

    def __init__(self, split: Split, broker: str, key_filter: bytes | None,
                 events_max: int, fail_on_data_loss: bool,
                 security: ClientSecurity | None = None, incarnation: str | None = None
                 ) -> None:
        super().__init__(None)
        self.split = split
        # The topic's incarnation the split's offsets are of (None: not known).
        self.incarnation = incarnation
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
                                           partition.events_max, partition.security,
                                           partition.incarnation):
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
    elif error.failure == Failure.RECREATED:
        what = (f"{where} are gone: the topic was deleted and created again since the "
                "batch was planned (the broker holds another incarnation of it than the one "
                "the offsets are of), so they now name other events or none")
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
                 security: ClientSecurity | None = None, incarnation: str | None = None
                 ) -> None:
        super().__init__(split, broker, key_filter, events_max, fail_on_data_loss, security,
                         incarnation)
        self.snapshot_offset = snapshot_offset


def read_snapshot_split(partition: KeybusSnapshotPartition,
                        schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Arrow batches of a snapshot split (see spark_connector/snapshot.py).

    Streaming: retention may remove the log this read needs after the batch
    was planned (before the task's stream pins it, or while a broken stream is
    resumed: a restarted broker has no pins). failOnDataLoss=false then goes
    on from where the read stood, past the removed log (`past_retention`):
    nothing already handed to Spark is read again, and only events retention
    removed are skipped (with a warning).

    The read sends the topic's incarnation the batch was planned with, at its
    first open and every reopen, so a topic deleted and created again since
    (before the task, or while its stream was away from a lost broker) is
    refused (TopicRecreated), never read into the old topic's snapshot or log:
    data loss, as offsets that went back.

    Raises:
        DataLossError: the log the snapshot's catch-up needs is gone and
            failOnDataLoss is true; or the topic was deleted and created again
            since the batch was planned, or (streaming) the split's offsets went
            back or its topic was deleted since, and failOnDataLoss is true
            (false: skipped).
        BrokerCallError: the read failed for another reason, or retention
            removed the log ahead of it more than RETENTION_RESUMES_MAX times
            in a row.
    """
    split = partition.split
    key_filter, ranges = partition.read_args()

    def records(start: BootstrapPosition | None, progress: Progress) -> Iterator[pb.Record]:
        return snapshot_records(partition.broker, split.topic, split.partition, ranges,
                                key_filter, partition.events_max, start, split.stop,
                                partition.security, progress, partition.incarnation)

    if partition.snapshot_offset is None:  # batch: the view now
        try:
            yield from _coalesced(records(None, Progress()), partition.events_max, schema)
        except _client.BrokerCallError as e:
            if e.failure != Failure.RECREATED:
                raise
            _log.warning("%s; skipped (failOnDataLoss=false)", _skip_lost(
                e, f"{split.topic}/{split.partition}: the rows of its compacted view, which "
                   "this task read,", partition.fail_on_data_loss))
        return
    where = (f"{split.topic}/{split.partition}: the snapshot as of offset "
             f"{partition.snapshot_offset} and the log up to offset {split.stop}, which this "
             "task read")
    start = BootstrapPosition(SNAPSHOT, partition.snapshot_offset)
    for resumes in range(RETENTION_RESUMES_MAX + 1):
        progress = Progress()
        try:
            yield from _coalesced(records(start, progress), partition.events_max, schema)
            return
        except _client.BrokerCallError as e:
            if e.failure != Failure.RETENTION:
                _log.warning("%s; skipped (failOnDataLoss=false)",
                             _skip_lost(e, f"{where},", partition.fail_on_data_loss))
                return
            if partition.fail_on_data_loss:
                raise DataLossError(
                    f"{where}: retention removed log it needs while it read ({e}). Set "
                    "failOnDataLoss=false to skip the events retention removed and go on, "
                    f"{_NEW_CHECKPOINT}") from None
            if resumes == RETENTION_RESUMES_MAX:
                raise _client.BrokerCallError(
                    f"{where}: retention removed the log ahead of it {resumes + 1} times in a "
                    f"row, each time after it went on past the removed log ({e}); give the "
                    "topic a longer retention", Failure.OTHER) from None
            stood = progress.position or start
            log_start = _log_start(partition)
            if log_start is None:
                _log.warning("%s: the topic was deleted while it read; skipped the rest "
                             "(failOnDataLoss=false)", where)
                return
            start = past_retention(stood, log_start)
            if start == stood:  # the cut is made, its start offset not yet moved: a moment
                time.sleep(RETENTION_WAIT_S * (resumes + 1))
                continue
            _log.warning("%s: %s (failOnDataLoss=false)", where, _skipped_words(stood, start))


def _log_start(partition: KeybusSnapshotPartition) -> int | None:
    """The partition's first stored offset now (None: its topic is gone)."""
    split = partition.split
    bounds = _client.describe(partition.broker, [split.topic], partition.security,
                              missing_ok=True)
    found = bounds.get(TopicPartition(split.topic, split.partition))
    return None if found is None else found.start_offset


def _skipped_words(stood: BootstrapPosition, start: BootstrapPosition) -> str:
    """What going on from `start` instead of `stood` skips, in words."""
    if stood.phase == SNAPSHOT:
        after = ("" if stood.source is None else
                 f" after key {stood.key!r} of source {stood.source!r}")
        return (f"retention removed the log below offset {start.snapshot_offset} while it "
                f"read the snapshot{after}; the keys it had not read yet come from the "
                f"snapshot as of offset {start.snapshot_offset}, and the removed events of "
                f"offsets {stood.snapshot_offset}..{start.snapshot_offset - 1} of the keys it "
                "had read are skipped")
    return (f"retention removed offsets {stood.next_offset}..{start.next_offset - 1} while "
            f"it read the log; skipped, going on at offset {start.next_offset}")
