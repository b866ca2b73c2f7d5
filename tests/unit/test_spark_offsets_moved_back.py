"""A streaming query whose checkpointed offsets are above what a partition now holds.

Goal: Kafka's rules for offsets that went backwards, decided on the driver
when a micro-batch is planned. A partition whose end is below the offset the
query reached (topic deleted and created again, log truncated) is data loss:
failOnDataLoss=true fails planning with a message naming the topic partition,
both offsets and what to do; false logs it and goes on from the new end, so
events produced after that reach the query (the old code kept the checkpointed
offset as the batch end: nothing was read until the new log passed it, and
the events below it were skipped without a word). A start below the
partition's start_offset (retention) is checked there too instead of only by
the task's read. Method: the pure planning (`offsets_moved_back`,
`plan_stream_batch`) on offsets, and `KeybusStreamReader.latestOffset` /
`partitions` with the broker's DescribeTopic replaced by fixed bounds. The
same with real Spark and a real broker: tests/e2e/test_spark_offsets_moved_back.py.
"""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from sdk.core.model import TopicPartition
from spark_connector import _client
from spark_connector.options import Use, parse_read_options
from spark_connector.partitioning import (
    DataLossError,
    PartitionBounds,
    moved_back,
    offsets_moved_back,
    plan_stream_batch,
)
from spark_connector.schema import spark_schema
from spark_connector.source import KeybusStreamReader
from spark_connector.task_read import KeybusSnapshotPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_an_end_below_the_reached_offset_is_reported_with_both_offsets() -> None:
    reached = {T0: 100, T1: 40}
    assert moved_back(reached, {T0: 30, T1: 40}) == {T0: 30}
    assert offsets_moved_back(reached, {T0: 30}) == [
        "t/0's offset was changed from 100 to 30: its log now ends below the offset the query "
        "had reached (the topic was deleted and created again, or its log was truncated)"]
    assert moved_back({T1: 7}, {T0: 5}) == {T1: None}
    assert offsets_moved_back({T1: 7}, {T1: None}) == [
        "t/1 is gone (the topic now has fewer partitions), the query had read it up to offset 7"]
    assert moved_back({T0: 5}, {T0: 5}) == {}


def test_an_end_only_held_back_by_a_restarted_cluster_broker_did_not_move() -> None:
    # Its readable end is its start until it learns the high watermark; the log is there.
    assert moved_back({T0: 100}, {T0: 0}, {T0: 120}) == {}
    assert moved_back({T0: 100}, {T0: 0}, {T0: 60}) == {T0: 0}
    assert plan_stream_batch({T0: 90}, {T0: 100}, {T0: PartitionBounds(0, 0)}, True,
                             {T0: 120}) == ({T0: 90}, {T0: 100}, [])


def test_planning_fails_on_a_stop_below_its_start_with_fail_on_data_loss() -> None:
    bounds = {T0: PartitionBounds(0, 30), T1: PartitionBounds(0, 60)}
    with pytest.raises(DataLossError) as caught:
        plan_stream_batch({T0: 100, T1: 50}, {T0: 30, T1: 60}, bounds, True)
    message = str(caught.value)
    assert "t/0's offset was changed from 100 to 30" in message, message
    assert "failOnDataLoss=false" in message and "new checkpointLocation" in message, message


def test_without_fail_on_data_loss_the_partition_that_went_back_reads_nothing() -> None:
    bounds = {T0: PartitionBounds(0, 30), T1: PartitionBounds(0, 60)}
    starts, stops, warnings = plan_stream_batch({T0: 100, T1: 50}, {T0: 30, T1: 60}, bounds,
                                                False)
    assert (starts, stops) == ({T1: 50}, {T1: 60})
    assert len(warnings) == 1 and "t/0's offset was changed from 100 to 30" in warnings[0]


def test_a_rerun_batch_above_the_end_now_is_data_loss() -> None:
    # Batch [50, 100) was in the offset log, not committed; the topic came back with 30.
    bounds = {T0: PartitionBounds(0, 30)}
    with pytest.raises(DataLossError, match=r"t/0's offset was changed from 100 to 30"):
        plan_stream_batch({T0: 50}, {T0: 100}, bounds, True)
    assert plan_stream_batch({T0: 50}, {T0: 100}, bounds, False)[:2] == ({}, {})
    with pytest.raises(DataLossError, match=r"t/1 is gone"):
        plan_stream_batch({T0: 0, T1: 5}, {T0: 30, T1: 9}, bounds, True)


def test_a_start_below_the_stored_offsets_is_caught_when_planning() -> None:
    bounds = {T0: PartitionBounds(250, 600)}
    with pytest.raises(DataLossError, match=r"t/0: offsets 150\.\.249 are no longer stored"):
        plan_stream_batch({T0: 150}, {T0: 300}, bounds, True)
    starts, stops, warnings = plan_stream_batch({T0: 150}, {T0: 300}, bounds, False)
    assert (starts, stops) == ({T0: 250}, {T0: 300})
    assert warnings == ["t/0: offsets 150..249 are no longer stored (retention removed them); "
                        "skipped (failOnDataLoss=false)"]
    assert plan_stream_batch({T0: 250}, {T0: 300}, bounds, True) == ({T0: 250}, {T0: 300}, [])


def _reader(monkeypatch: pytest.MonkeyPatch, bounds: dict[TopicPartition, PartitionBounds],
            fail_on_data_loss: str, durable: dict[TopicPartition, int] | None = None
            ) -> KeybusStreamReader:
    monkeypatch.setattr(_client, "describe", lambda *args, **kwargs: dict(bounds))
    monkeypatch.setattr(_client, "durable_ends", lambda *args: dict(durable or {}))
    options = parse_read_options({"broker": "127.0.0.1:1", "topic": "t",
                                  "failOnDataLoss": fail_on_data_loss}, Use.STREAM_READ)
    return KeybusStreamReader(options, spark_schema(False))


def test_latest_offset_fails_when_the_topic_came_back_below_the_checkpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reader = _reader(monkeypatch, {T0: PartitionBounds(0, 30)}, "true")
    with pytest.raises(DataLossError, match=r"t/0's offset was changed from 100 to 30"):
        reader.latestOffset({"t": {"0": 100}}, ReadAllAvailable())


def test_latest_offset_goes_on_from_the_new_end_without_fail_on_data_loss(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    bounds = {T0: PartitionBounds(0, 30), T1: PartitionBounds(0, 80)}
    reader = _reader(monkeypatch, bounds, "false")
    start = {"t": {"0": 100, "1": 50}}
    end = reader.latestOffset(start, ReadMaxRows(10))
    assert end == {"t": {"0": 30, "1": 60}}  # the old code kept 100: nothing read till then
    with caplog.at_level(logging.WARNING, logger="keybus.spark"):
        splits = reader.partitions(start, end)
    assert [(s.split.partition, s.split.start, s.split.stop) for s in splits] == [(1, 50, 60)]
    assert "t/0's offset was changed from 100 to 30" in caplog.text
    bounds[T0] = PartitionBounds(0, 45)  # the next batch reads on from the new end
    assert reader.latestOffset(end, ReadAllAvailable()) == {"t": {"0": 45, "1": 80}}


def test_partitions_checks_retention_on_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    # A batch re-run after a restart: partitions() without latestOffset asks the broker.
    start, end = {"t": {"0": 150}}, {"t": {"0": 300}}
    reader = _reader(monkeypatch, {T0: PartitionBounds(250, 600)}, "true")
    with pytest.raises(DataLossError, match=r"t/0: offsets 150\.\.249 are no longer stored"):
        reader.partitions(start, end)  # the old code planned [150, 300): the task found out
    reader = _reader(monkeypatch, {T0: PartitionBounds(250, 600)}, "false")
    assert [(s.split.start, s.split.stop) for s in reader.partitions(start, end)] == [(250, 300)]


def test_latest_offset_waits_for_a_broker_that_holds_its_readers_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reader = _reader(monkeypatch, {T0: PartitionBounds(0, 0)}, "true", {T0: 120})
    assert reader.latestOffset({"t": {"0": 100}}, ReadAllAvailable()) == {"t": {"0": 100}}


def test_a_deleted_topic_is_data_loss_and_comes_back_from_its_start(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # The old code failed latestOffset with DescribeTopic's "does not exist" whatever
    # failOnDataLoss said; Kafka's source reports the partitions as gone.
    reader = _reader(monkeypatch, {}, "true")
    with pytest.raises(DataLossError) as caught:
        reader.latestOffset({"t": {"0": 100}}, ReadAllAvailable())
    message = str(caught.value)
    assert "topic 't' was deleted, the query had read t/0 up to offset 100" in message, message
    assert "failOnDataLoss=false" in message and "new checkpointLocation" in message, message

    bounds: dict[TopicPartition, PartitionBounds] = {}
    reader = _reader(monkeypatch, bounds, "false")
    start = {"t": {"0": 100}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {}  # the topic's partitions leave the query's offsets
    with caplog.at_level(logging.WARNING, logger="keybus.spark"):
        assert reader.partitions(start, end) == []
    assert "topic 't' was deleted" in caplog.text and "going on" in caplog.text
    assert reader.latestOffset(end, ReadAllAvailable()) == {}  # nothing until it comes back
    bounds[T0] = PartitionBounds(0, 5)  # created again: read from its start
    end2 = reader.latestOffset(end, ReadAllAvailable())
    assert end2 == {"t": {"0": 5}}
    assert [(s.split.start, s.split.stop) for s in reader.partitions(end, end2)] == [(0, 5)]


SNAPSHOT_START = {"t": {"0": 100}, "$snapshot": {"start": 1}}


def test_the_snapshot_batch_is_checked_against_retention_on_the_driver(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The snapshot as of 100 needs the log from 100; retention removed it up to 150.
    # The old code planned it unchecked: the task failed (true) or read a new snapshot
    # and no log (false), skipping or repeating events around the batch's end.
    reader = _reader(monkeypatch, {T0: PartitionBounds(150, 400)}, "true")
    with pytest.raises(DataLossError) as caught:
        reader.partitions(SNAPSHOT_START, {"t": {"0": 300}})
    message = str(caught.value)
    assert message.startswith("startingOffsets=snapshot: "), message
    assert "t/0: offsets 100..149 are no longer stored" in message, message
    reader = _reader(monkeypatch, {T0: PartitionBounds(150, 400)}, "false")
    (split,) = reader.partitions(SNAPSHOT_START, {"t": {"0": 300}})
    assert isinstance(split, KeybusSnapshotPartition)
    assert (split.snapshot_offset, split.split.stop) == (150, 300)  # as of what is stored


def test_a_snapshot_batch_rerun_after_a_restart_is_read_as_of_its_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Restarted before batch 0 was committed, Spark asks initialOffset again: the view's
    # offset is now 200, past the end (120) the batch was planned with. The old code
    # read the snapshot as of 200, and batch 1 read 120..199 again from the log.
    reader = _reader(monkeypatch, {T0: PartitionBounds(0, 250)}, "true")
    start = {"t": {"0": 200}, "$snapshot": {"start": 1}}
    (split,) = reader.partitions(start, {"t": {"0": 120}})
    assert isinstance(split, KeybusSnapshotPartition)
    assert (split.snapshot_offset, split.split.stop) == (120, 120)
