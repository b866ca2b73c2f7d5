"""startingOffsets=snapshot splits read with the topic's incarnation as planned.

Goal: a snapshot split (batch: the view now; streaming: the view as of P,
then the log) carries the incarnation DescribeTopic named when its batch was
planned, and its Bootstrap read sends it (the broker refuses another:
TopicRecreated), as log splits do; the refusal is data loss, handled as for
log splits: failOnDataLoss=true fails the task naming it, false skips the
rest of the split with a warning, after the rows that arrived. A streaming
query's initial snapshot offsets name the incarnations too, so planning's
rules (incarnation.py) see a topic made again before the first batch. The
old code's snapshot splits sent none (a topic made again since planning, or
while a task's stream was away, was read as the planned one), and a batch
snapshot's refusal failed the task as an unknown error.
Method: the stream and batch readers' planning with DescribeTopic replaced
by fixed answers; `read_snapshot_split` with the connector's snapshot read
replaced by a fake that records its arguments, yields records and raises.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

from sdk import errors
from sdk.core.model import FULL_RANGE, TopicPartition
from sdk.core.pb import keybus_pb2 as pb
from spark_connector import _client, snapshot, task_read
from spark_connector.options import Use, parse_read_options
from spark_connector.partitioning import DataLossError, PartitionBounds, Split
from spark_connector.schema import arrow_schema, spark_schema
from spark_connector.source import KeybusBatchReader, KeybusStreamReader
from spark_connector.task_read import KeybusSnapshotPartition, read_snapshot_split
from tests.support.wire import int_batch

OLD, NEW = "5f0c9a1e2b3d4c6a", "9d2e7b4a1c0f3e58"
T0 = TopicPartition("t", 0)


def _infos(*args: Any, **kwargs: Any) -> dict[str, pb.TopicInfo]:
    return {"t": pb.TopicInfo(topic="t", incarnation=OLD, config=pb.TopicConfig(view=pb.VIEW_ON),
                              partitions=[pb.PartitionInfo(partition=0, end_offset=50,
                                                           view_offset=40)])}


def test_a_batch_snapshot_split_carries_the_incarnation_it_was_planned_with(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "topic_infos", _infos)
    options = parse_read_options({"broker": "127.0.0.1:1", "topic": "t",
                                  "startingOffsets": "snapshot"}, Use.BATCH_READ)
    [split] = KeybusBatchReader(options, spark_schema(False)).partitions()
    assert isinstance(split, KeybusSnapshotPartition)
    assert split.incarnation == OLD and split.snapshot_offset is None


def test_a_streaming_snapshot_names_and_carries_the_incarnation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "topic_infos", _infos)
    monkeypatch.setattr(_client, "describe", lambda *args, **kwargs: {
        T0: PartitionBounds(0, 50, OLD)})
    monkeypatch.setattr(_client, "durable_ends", lambda *args: {})
    options = parse_read_options({"broker": "127.0.0.1:1", "topic": "t",
                                  "startingOffsets": "snapshot"}, Use.STREAM_READ)
    reader = KeybusStreamReader(options, spark_schema(False))
    start = reader.initialOffset()
    assert start == {"t": {"0": 40}, "$snapshot": {"start": 1}, "$incarnations": {"t": OLD}}
    [split] = reader.partitions(start, {"t": {"0": 50}, "$incarnations": {"t": OLD}})
    assert isinstance(split, KeybusSnapshotPartition)
    assert (split.snapshot_offset, split.split.stop, split.incarnation) == (40, 50, OLD)


class FakeSnapshotRead:
    """The connector's snapshot read: records, then the refusal of another incarnation."""

    def __init__(self) -> None:
        self.incarnations: list[str | None] = []
        refusal = errors.TopicRecreated(
            f"this bootstrap of 't'/0 (a new snapshot) is of incarnation {OLD!r} of the topic, "
            f"which was deleted and created again (it is now incarnation {NEW!r})",
            errors.FAILED_PRECONDITION)
        refusal.broker_error = "bootstrap_other_incarnation"
        self.error = _client.call_failure("Bootstrap('t'/0)", "127.0.0.1:1", refusal)

    def records(self, broker: str, topic: str, partition: int, *args: Any
                ) -> Iterator[pb.Record]:
        self.incarnations.append(args[-1])  # the last argument: the planned incarnation
        yield pb.Record(topic="t", partition=0, base_offset=0, batch=int_batch(list(range(10))))
        raise self.error


def _read(monkeypatch: pytest.MonkeyPatch, snapshot_offset: int | None,
          fail_on_data_loss: bool) -> tuple[list[int], BaseException | None, FakeSnapshotRead]:
    fake = FakeSnapshotRead()
    monkeypatch.setattr(task_read, "snapshot_records", fake.records)
    partition = KeybusSnapshotPartition(Split("t", 0, (FULL_RANGE,), 40, 50), "127.0.0.1:1",
                                        None, 100, fail_on_data_loss, snapshot_offset,
                                        incarnation=OLD)
    offsets: list[int] = []
    raised = None
    try:
        for batch in read_snapshot_split(partition, arrow_schema(spark_schema(False))):
            offsets += batch.column("offset").to_pylist()
    except Exception as e:
        raised = e
    return offsets, raised, fake


@pytest.mark.parametrize("snapshot_offset", [None, 40], ids=["batch", "streaming"])
def test_a_topic_made_again_under_a_snapshot_read_is_data_loss(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        snapshot_offset: int | None) -> None:
    offsets, raised, fake = _read(monkeypatch, snapshot_offset, True)
    assert fake.incarnations == [OLD]  # the old code sent none
    assert offsets == list(range(10)) and isinstance(raised, DataLossError), raised
    message = str(raised)
    assert "deleted and created again since the batch was planned" in message, message
    assert "failOnDataLoss=false" in message and repr(NEW) in message, message
    with caplog.at_level(logging.WARNING, logger="keybus.spark"):
        offsets, raised, fake = _read(monkeypatch, snapshot_offset, False)
    assert raised is None and offsets == list(range(10)) and fake.incarnations == [OLD]
    assert "deleted and created again since the batch was planned" in caplog.text
    assert "skipped (failOnDataLoss=false)" in caplog.text
