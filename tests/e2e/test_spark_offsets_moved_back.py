"""A streaming query restarted after its topic was deleted and created again,
from a checkpoint whose offsets name no incarnation (written before they did).

Goal: Kafka's rule for offsets that went backwards, which is what still tells
such a checkpoint (or a log a cluster broker truncated) from the new log; a
checkpoint that names the topic's incarnation is judged by it instead
(tests/e2e/test_spark_topic_recreated.py). The recreated topic's
offsets restart at 0, below the query's checkpoint: with failOnDataLoss=true
the restarted query fails when it plans its next micro-batch, naming the topic
partition and both offsets and saying what to do; with false it goes on from
the partition's new end, so the events produced after that reach the sink.
(The old code kept the checkpointed offset as the batch end: no error, and no
event reached the sink until the new log passed the old offset.)
Method: a query (1 partition) reads 100 events to parquet with a checkpoint
and stops; the incarnations are taken out of the checkpoint's offsets log (as
an older connector wrote it); the topic is deleted and created again with 30
events; the query is
restarted on the same checkpoint with failOnDataLoss=true (it must end with
an error within a bounded time), then with false; 20 more events are
produced, and the sink must hold the first 100 plus exactly those 20.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sdk.core.pb import keybus_pb2 as pb
from tests.e2e.conftest import Topics

pytestmark = pytest.mark.spark


def _start(topics: Topics, name: str, out: Path, checkpoint: Path, fail: str) -> Any:
    stream = (topics.spark.readStream.format("keybus").option("broker", topics.address)
              .option("topic", name).option("startingOffsets", "earliest")
              .option("failOnDataLoss", fail).load())
    return (stream.select("offset", "key_long").writeStream.format("parquet")
            .option("path", str(out)).option("checkpointLocation", str(checkpoint)).start())


def _forget_incarnations(checkpoint: Path) -> None:
    """The checkpoint's offsets log as a connector wrote it before offsets named
    incarnations: each batch's source offsets JSON without "$incarnations"."""
    from spark_connector.incarnation import INCARNATIONS_KEY

    files = [f for f in (checkpoint / "offsets").iterdir() if f.name.isdigit()]
    assert files, "the query wrote no offsets"
    for path in files:
        lines = path.read_text().split("\n")
        for i, line in enumerate(lines[2:], start=2):  # v1, the batch's metadata, sources
            if INCARNATIONS_KEY in line:
                offsets = json.loads(line)
                del offsets[INCARNATIONS_KEY]
                lines[i] = json.dumps(offsets)
        path.write_text("\n".join(lines))
        (path.parent / f".{path.name}.crc").unlink(missing_ok=True)  # Hadoop's, of the old text


def test_restart_after_the_topic_was_recreated(topics: Topics, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    name = topics.make("spark-recreated")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    topics.produce_ints(name, 0, list(range(100)))
    query = _start(topics, name, out, checkpoint, "true")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    _forget_incarnations(checkpoint)
    topics.stub.DeleteTopic(pb.DeleteTopicRequest(topic=name), timeout=10)
    topics.make(name)
    topics.produce_ints(name, 0, list(range(1000, 1030)))  # offsets 0..29, below 100

    query = _start(topics, name, out, checkpoint, "true")
    try:
        with pytest.raises(StreamingQueryException) as caught:
            query.awaitTermination(60)  # bounded: still running after 60 s fails the test
    finally:
        query.stop()
    message = str(caught.value)
    assert f"{name}/0's offset was changed from 100 to 30" in message, message
    assert "failOnDataLoss=false" in message and "new checkpointLocation" in message, message

    query = _start(topics, name, out, checkpoint, "false")
    try:
        query.processAllAvailable()  # goes on from the new end, 30 (0..29 are skipped)
        topics.produce_ints(name, 0, list(range(2000, 2020)))  # offsets 30..49
        query.processAllAvailable()
    finally:
        query.stop()
    rows = sorted((r.offset, r.key_long) for r in topics.spark.read.parquet(str(out)).collect())
    assert rows == sorted([(o, o) for o in range(100)] + [(30 + i, 2000 + i) for i in range(20)])
