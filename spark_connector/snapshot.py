"""startingOffsets=snapshot: read a topic's compacted view, then (streaming) its log.

* Batch: one input partition per (topic partition, hash range group); each
  reads a snapshot of its partition's view (the latest event per key, no
  tombstones), filtered in the broker by its ranges and the `filter` option.
  Each topic partition's rows are the view at one point.
* Streaming: the query's initial offset is each partition's view offset P
  (asked on the driver), marked as a snapshot start. The first micro-batch
  reads the snapshot as of P (every key's latest event below P) and the log
  from P to the batch's end; later batches read the log as usual. The
  snapshot holds events below P and the log events from P, so no event is
  read twice or skipped between them (a key changed after P comes from the
  log with its newer value). The first batch is checked when it is planned
  like every batch (`snapshot_starts`): the log from P must still be stored
  (retention), and P is never past the batch's end. Retention that removes
  it after planning is met by the task's read (task_read.py), which goes on
  past the removed log from where it stood (`past_retention`) with
  failOnDataLoss=false.

Spark glue lives in source.py; this module holds the offsets marker (pure)
and the task-side read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sdk import errors
from sdk.bootstrap import SNAPSHOT, BootstrapPosition
from sdk.core.model import HashRange, TopicPartition
from sdk.core.pb import keybus_pb2 as pb
from sdk.security import ClientSecurity
from sdk.sync import SyncReader
from spark_connector._client import BrokerCallError, call_failure, topic_infos

SNAPSHOT_KEY = "$snapshot"  # never a topic name (topics are [A-Za-z0-9._-]+)
SNAPSHOT_MARK = {"start": 1}


def mark_snapshot(offsets: dict[str, Any]) -> dict[str, Any]:
    """Offsets JSON that says: the batch starting here reads the snapshot first."""
    return {**offsets, SNAPSHOT_KEY: dict(SNAPSHOT_MARK)}


def split_snapshot_mark(offsets: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """(offsets without the mark, whether it was there)."""
    plain = {k: v for k, v in offsets.items() if k != SNAPSHOT_KEY}
    return plain, SNAPSHOT_KEY in offsets


# Said before a data loss report of the snapshot's micro-batch (its offsets are where
# the snapshot is read as of).
SNAPSHOT_CONTEXT = ("startingOffsets=snapshot: the first micro-batch reads each partition's "
                    "compacted view as of its start offset, then the log from there to the "
                    "batch's end; ")


def snapshot_starts(starts: Mapping[TopicPartition, int],
                    stops: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """The offsets the first micro-batch reads each snapshot as of: its start, but
    never past the batch's end.

    Spark keeps no initial offsets of a Python source: a query restarted before
    its first batch was committed asks initialOffset again and gets the view's
    offset now, which may be past the end the batch was planned with (kept in
    the checkpoint). A snapshot as of that offset would hold events the next
    batch reads again from the end; as of the end it holds exactly the events
    below it. The offsets are then checked like any batch's (retention,
    offsets that went back: partitioning.plan_stream_batch).
    """
    return {tp: min(start, stops.get(tp, start)) for tp, start in starts.items()}


def reads_log(start: BootstrapPosition, stop: int | None) -> bool:
    """Whether a streaming snapshot read from `start` reads log after its snapshot:
    the log between where it stands (the snapshot's offset, or the next offset in
    the log) and `stop`."""
    if stop is None:
        return False
    return stop > (start.snapshot_offset if start.phase == SNAPSHOT else start.next_offset)


def past_retention(position: BootstrapPosition, log_start: int) -> BootstrapPosition:
    """Where a streaming snapshot read goes on when retention removed the log below
    `log_start` while it read, from `position` (what it had handed out):
    failOnDataLoss=false. Pure.

    Nothing handed out is read again, and only removed log events are skipped:
    * in the snapshot: the snapshot resumes after the last key handed out, as of
      `log_start` (every key's latest event below it, so a key changed in the
      removed log keeps its newer value), and the log follows from `log_start`.
      Keys already handed out lose only their changes in the removed log (their
      entries below the old offset went out; those at or past `log_start` come
      from the log);
    * in the log: it goes on at `log_start`; the events before it are gone.
    """
    if position.phase == SNAPSHOT:
        return replace(position, snapshot_offset=max(position.snapshot_offset, log_start))
    next_offset = max(position.next_offset, log_start)
    return replace(position, next_offset=next_offset,
                   target_offset=max(position.target_offset, next_offset))


@dataclass(slots=True)
class Progress:
    """How far a snapshot read got: its position after the last record it yielded
    (None until the reader says)."""

    position: BootstrapPosition | None = None


def snapshot_records(broker: str, topic: str, partition: int,
                     ranges: Sequence[HashRange] | None, key_filter: pb.KeyFilter | None,
                     events_max: int, start: BootstrapPosition | None,
                     stop: int | None, security: ClientSecurity | None = None,
                     progress: Progress | None = None,
                     incarnation: str | None = None) -> Iterator[pb.Record]:
    """The records of a snapshot read, then (streaming) the log up to `stop`.

    Args:
        start: None: a new snapshot, and nothing after it (batch). A position
            (streaming): the snapshot as of `start.snapshot_offset`, then the
            log up to `stop` (exclusive); or, a position in the log (a read
            that goes on, `past_retention`), the log from there up to `stop`.
        progress: set to the reader's position before each record is yielded.
        incarnation: the topic's incarnation the split was planned with: the
            broker refuses a bootstrap of another (RECREATED), at its first
            open and every reopen; None = whichever the broker holds.
    Raises:
        BrokerCallError: the read failed (out_of_range: the log the snapshot
            needs was removed by retention; recreated: the topic was deleted
            and created again since the split was planned).
    """
    log_wanted = start is not None and reads_log(start, stop)
    if start is not None and start.phase != SNAPSHOT and not log_wanted:
        return  # a read that stood in the log, and the log it had left is gone
    try:
        with SyncReader(broker, topic, partition, start=start or "bootstrap", hash_ranges=ranges,
                        key_filter=key_filter, events_max=events_max,
                        include_tombstones=False, stop_offset=stop if log_wanted else None,
                        security=security, incarnation=incarnation or None) as reader:
            for batch in reader:
                if batch.phase != SNAPSHOT and not log_wanted:
                    return
                if batch.marker is None and batch.count:
                    if progress is not None:
                        progress.position = reader.position
                    yield batch.record
    except errors.KeybusError as e:
        raise call_failure(f"Bootstrap({topic!r}/{partition})", broker, e) from None


def view_offsets(broker: str, topics: Sequence[str], security: ClientSecurity | None = None
                 ) -> tuple[dict[TopicPartition, int], dict[str, str]]:
    """Each partition's view offset (the view holds every event below it), and each
    topic's incarnation the offsets are of (known ones only).

    Raises:
        BrokerCallError: a topic keeps no compacted view, does not exist, or
            the broker cannot be reached.
    """
    out: dict[TopicPartition, int] = {}
    incarnations: dict[str, str] = {}
    for topic, info in topic_infos(broker, topics, security).items():
        if info.incarnation:
            incarnations[topic] = info.incarnation
        if info.config.view != pb.VIEW_ON:
            raise BrokerCallError(f"startingOffsets=snapshot: topic {topic!r} keeps no "
                                  "compacted view; create it with view on (keybus topics "
                                  f"create {topic} --view)")
        for p in info.partitions:
            out[TopicPartition(topic, p.partition)] = p.view_offset
    return out, incarnations
