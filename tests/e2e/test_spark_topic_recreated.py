"""A streaming query restarted after its topic was made again and grew past the checkpoint.

Goal: a topic deleted and created again is another incarnation; the query's
checkpointed offsets name the one they are of, so planning notices the change
even when the new topic already holds more events than the checkpoint's
offset (where offsets alone look valid). With failOnDataLoss=true the
restarted query fails naming the topic and both incarnations and saying what
to do; with false it reads the new topic from its start: every event of the
new topic reaches the sink. (The old code read on from the checkpointed
offset 100 without a word: the new topic's events 0..99 never reached the
sink.) Also a task's read names the incarnation its batch was planned with:
the broker refuses it for the topic made again (Failure.RECREATED, data loss
in the task).
Method: a query (1 partition) reads 100 events to parquet with a checkpoint
and stops; the topic is deleted and created again with 150 events; the query
is restarted on the same checkpoint with failOnDataLoss=true (it must end with
an error within a bounded time), then with false; the sink must hold the old
topic's 100 events and the new topic's 150.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sdk.core.pb import keybus_pb2 as pb
from spark_connector import _client
from tests.e2e.conftest import Topics

pytestmark = pytest.mark.spark


def _start(topics: Topics, name: str, out: Path, checkpoint: Path, fail: str) -> Any:
    stream = (topics.spark.readStream.format("keybus").option("broker", topics.address)
              .option("topic", name).option("startingOffsets", "earliest")
              .option("failOnDataLoss", fail).load())
    return (stream.select("offset", "key_long").writeStream.format("parquet")
            .option("path", str(out)).option("checkpointLocation", str(checkpoint)).start())


def _incarnation(topics: Topics, name: str) -> str:
    info = topics.stub.DescribeTopic(pb.DescribeTopicRequest(topic=name), timeout=10)
    assert len(info.incarnation) == 16, info
    return str(info.incarnation)


def test_restart_after_the_topic_was_made_again_past_the_checkpoint(
        topics: Topics, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    name = topics.make("spark-reincarnated")
    old = _incarnation(topics, name)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    topics.produce_ints(name, 0, list(range(100)))
    query = _start(topics, name, out, checkpoint, "true")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    topics.stub.DeleteTopic(pb.DeleteTopicRequest(topic=name), timeout=10)
    topics.make(name)
    new = _incarnation(topics, name)
    topics.produce_ints(name, 0, list(range(1000, 1150)))  # offsets 0..149, past 100

    # A task of a batch planned on the old topic: its read is refused, not served.
    with pytest.raises(_client.BrokerCallError) as refused:
        list(_client.read_records(topics.address, name, 0, 100, 150, None, None, 100,
                                  incarnation=old))
    assert refused.value.failure == _client.Failure.RECREATED, refused.value

    query = _start(topics, name, out, checkpoint, "true")
    try:
        with pytest.raises(StreamingQueryException) as caught:
            query.awaitTermination(60)  # bounded: still running after 60 s fails the test
    finally:
        query.stop()
    message = str(caught.value)
    assert f"topic {name!r} was deleted and created again" in message, message
    assert f"incarnation {old!r}" in message and f"incarnation {new!r}" in message, message
    assert "failOnDataLoss=false" in message and "new checkpointLocation" in message, message

    query = _start(topics, name, out, checkpoint, "false")
    try:
        query.processAllAvailable()  # the new topic from its start, 0..149
    finally:
        query.stop()
    rows = sorted((r.offset, r.key_long) for r in topics.spark.read.parquet(str(out)).collect())
    assert rows == sorted([(o, o) for o in range(100)] + [(o, 1000 + o) for o in range(150)])
