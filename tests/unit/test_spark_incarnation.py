"""A streaming query's offsets name each topic's incarnation, and planning checks it.

Goal: a topic deleted and created again (another incarnation) between two
micro-batches is data loss even when the new topic has grown past the
checkpointed offsets, where the offsets alone look valid. The old code read on
from the checkpointed offset: the new topic's first events were skipped
without a word. Now failOnDataLoss=true fails planning with a message naming
the topic, both incarnations and what to do; false logs one warning and reads
the new topic from its start. A checkpoint written before offsets carried
incarnations is read as before (unknown: only offsets that went back are
noticed). A topic made again after its batch was planned is caught when the
batch's splits are made, and each split carries the planned incarnation for
its task's read (the broker refuses another: TopicRecreated, task_read.py).
Method: the pure rules of spark_connector/incarnation.py, and
`KeybusStreamReader.latestOffset` / `partitions` with DescribeTopic replaced
by fixed bounds. The same with real Spark and a real broker:
tests/e2e/test_spark_topic_recreated.py.
"""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable

from sdk.core.model import TopicPartition
from spark_connector import _client
from spark_connector.incarnation import recreated, split_incarnations, with_incarnations
from spark_connector.options import Use, parse_read_options
from spark_connector.partitioning import DataLossError, PartitionBounds
from spark_connector.schema import spark_schema
from spark_connector.source import KeybusStreamReader

T0, U0 = TopicPartition("t", 0), TopicPartition("u", 0)
OLD, NEW = "5f0c9a1e2b3d4c6a", "9d2e7b4a1c0f3e58"
KEY = "$incarnations"


def test_offsets_name_incarnations_and_only_known_different_ones_count() -> None:
    offsets = {"t": {"0": 5}, "u": {"0": 7}}
    named = with_incarnations(offsets, {"t": OLD, "u": "", "gone": NEW})
    assert named == {"t": {"0": 5}, "u": {"0": 7}, KEY: {"t": OLD}}
    assert split_incarnations(named) == (offsets, {"t": OLD})
    assert split_incarnations(offsets) == (offsets, {})  # an old checkpoint: unknown
    assert with_incarnations(offsets, {}) == offsets
    assert recreated({"t": OLD, "u": OLD}, {"t": NEW, "u": OLD}) == {"t": (OLD, NEW)}
    assert recreated({}, {"t": NEW}) == {} and recreated({"t": OLD}, {"t": ""}) == {}
    assert recreated({"t": OLD}, {}) == {}  # deleted: judged as a deleted topic


def _reader(monkeypatch: pytest.MonkeyPatch, bounds: dict[TopicPartition, PartitionBounds],
            fail_on_data_loss: str) -> KeybusStreamReader:
    monkeypatch.setattr(_client, "describe", lambda *args, **kwargs: dict(bounds))
    monkeypatch.setattr(_client, "durable_ends", lambda *args: {})
    options = parse_read_options({"broker": "127.0.0.1:1", "topic": "t,u",
                                  "failOnDataLoss": fail_on_data_loss}, Use.STREAM_READ)
    return KeybusStreamReader(options, spark_schema(False))


# The query read t up to 100 of incarnation OLD; t was made again and holds 150 events.
START = {"t": {"0": 100}, "u": {"0": 20}, KEY: {"t": OLD, "u": OLD}}
GROWN = {T0: PartitionBounds(0, 150, NEW), U0: PartitionBounds(0, 30, OLD)}


def test_a_topic_made_again_past_the_checkpoint_fails_planning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reader = _reader(monkeypatch, GROWN, "true")
    with pytest.raises(DataLossError) as caught:
        reader.latestOffset(START, ReadAllAvailable())  # the old code returned t/0 at 150
    message = str(caught.value)
    assert f"topic 't' was deleted and created again: the query's offsets are of incarnation " \
           f"'{OLD}', the query had read t/0 up to offset 100; the topic is now incarnation " \
           f"'{NEW}'" in message, message
    assert "failOnDataLoss=false" in message and "new checkpointLocation" in message, message


def test_without_fail_on_data_loss_the_new_topic_is_read_from_its_start(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    reader = _reader(monkeypatch, GROWN, "false")
    with caplog.at_level(logging.WARNING, logger="keybus.spark"):
        end = reader.latestOffset(START, ReadAllAvailable())
        assert end == {"t": {"0": 150}, "u": {"0": 30}, KEY: {"t": NEW, "u": OLD}}
        splits = reader.partitions(START, end)
    assert [(s.split.topic, s.split.start, s.split.stop, s.incarnation) for s in splits] == [
        ("t", 0, 150, NEW), ("u", 20, 30, OLD)]  # the old code read t from 100
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, caplog.text
    assert f"now incarnation '{NEW}'" in caplog.text and "from its start" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="keybus.spark"):  # the next batch: nothing new
        assert reader.latestOffset(end, ReadAllAvailable()) == end
    assert caplog.text == ""


def test_a_checkpoint_without_incarnations_is_read_as_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reader = _reader(monkeypatch, GROWN, "true")
    old = {"t": {"0": 100}, "u": {"0": 20}}
    end = reader.latestOffset(old, ReadAllAvailable())
    assert end == {"t": {"0": 150}, "u": {"0": 30}, KEY: {"t": NEW, "u": OLD}}
    assert [(s.split.start, s.split.stop) for s in reader.partitions(old, end)] == [
        (100, 150), (20, 30)]


def test_a_topic_made_again_after_its_batch_was_planned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A batch re-run after a restart: planned on OLD, t is NEW now.
    end = {"t": {"0": 120}, "u": {"0": 30}, KEY: {"t": OLD, "u": OLD}}
    reader = _reader(monkeypatch, GROWN, "true")
    with pytest.raises(DataLossError, match=f"is now incarnation '{NEW}'"):
        reader.partitions(START, end)  # the old code planned t [100, 120) of the new topic
    reader = _reader(monkeypatch, GROWN, "false")
    assert [(s.split.topic, s.split.start, s.split.stop) for s in reader.partitions(START, end)
            ] == [("u", 20, 30)]
    assert reader.latestOffset(end, ReadAllAvailable()) == {
        "t": {"0": 150}, "u": {"0": 30}, KEY: {"t": NEW, "u": OLD}}
