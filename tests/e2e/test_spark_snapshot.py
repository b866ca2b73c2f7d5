"""startingOffsets=snapshot: the compacted view as a batch, and a stream that
starts from it and continues on the log.

Goal: a batch read gives exactly one row per live key (its latest event,
with its original offset, SCN and publish time; deleted keys absent), split
by hash range and filtered in the broker; a streaming query starting from a
snapshot then reading the log gets every later event exactly once, so the
rows applied in offset order equal the model of the full history.
Method: the shared local[2] session and broker; keys with updates and
deletes; the expected rows come from the log read over the wire.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from sdk.core.pb import keybus_pb2 as pb
from tests.support.bootstrap_model import wait_for_partition

pytestmark = pytest.mark.spark


def _produce_history(topics: Any, topic: str, partition: int, start: int, rounds: int) -> None:
    """Keys start..start+299 written `rounds` times; every 7th deleted in the last round."""
    keys = list(range(start, start + 300))
    for round_ in range(rounds):
        batch = topics._wire.int_batch(keys, b"r%d-" % round_)
        batch.sources.append("orders")
        if round_ == rounds - 1:
            batch.opcodes.extend([pb.DELETE if k % 7 == 0 else pb.UPSERT for k in keys])
        topics.produce(topic, partition, batch)


def _wait_views(topics: Any, topic: str, partitions: int) -> None:
    for p in range(partitions):
        end = topics.stub.DescribeTopic(pb.DescribeTopicRequest(topic=topic)).partitions[p].end_offset
        asyncio.run(wait_for_partition(topics.address, topic, lambda info, e=end: info.view_offset == e,
                                       "the view"))


def _latest_live(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Of full-log rows (ROW_COLUMNS), each key's latest, if it is not a DELETE."""
    latest: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for row in sorted(rows, key=lambda r: (r[1], r[2])):
        latest[(row[1], row[6], row[3], row[4])] = row
    return sorted(r for r in latest.values() if r[7] != "DELETE")


def test_batch_snapshot_is_one_row_per_live_key(topics: Any) -> None:
    topic = topics.make("spark-snapshot", partitions=2)
    for p in range(2):
        _produce_history(topics, topic, p, p * 1000, rounds=3)
    _wait_views(topics, topic, 2)
    expected = _latest_live(topics.expected(topic, partitions=2))
    assert len(expected) == 2 * (300 - 43)
    got = topics.rows(topics.reader(topic, startingOffsets="snapshot", ranges="2").load())
    assert got == expected
    filtered = topics.rows(topics.reader(topic, startingOffsets="snapshot", ranges="3",
                                         filter="mod:10:[3]").load())
    assert filtered == [r for r in expected if r[3] % 10 == 3]
    with pytest.raises(Exception, match="does not apply with startingOffsets=snapshot"):
        topics.reader(topic, startingOffsets="snapshot", endingOffsets="latest").load().collect()


def _apply(rows: list[Any]) -> dict[tuple[str, int], bytes]:
    state: dict[tuple[str, int], bytes] = {}
    for row in sorted(rows, key=lambda r: r.offset):
        if row.opcode == "DELETE":
            state.pop((row.source, row.key_long), None)
        else:
            state[(row.source, row.key_long)] = bytes(row.value)
    return state


def test_stream_from_snapshot_continues_on_the_log_exactly_once(topics: Any,
                                                                tmp_path: Path) -> None:
    topic = topics.make("spark-snapshot-stream")
    _produce_history(topics, topic, 0, 0, rounds=3)
    _wait_views(topics, topic, 1)
    snapshot_offset = topics.stub.DescribeTopic(
        pb.DescribeTopicRequest(topic=topic)).partitions[0].view_offset
    live_before = {r[2] for r in _latest_live(topics.expected(topic))}
    stream = (topics.spark.readStream.format("keybus").option("broker", topics.address)
              .option("topic", topic).option("startingOffsets", "snapshot")
              .option("ranges", "2").load())
    query = (stream.writeStream.format("memory").queryName("from_snapshot")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
        first = topics.spark.sql("SELECT * FROM from_snapshot").collect()
        _produce_history(topics, topic, 0, 150, rounds=2)  # updates, deletes and new keys
        deadline = time.monotonic() + 60
        while True:
            query.processAllAvailable()
            rows = topics.spark.sql("SELECT * FROM from_snapshot").collect()
            if max(r.offset for r in rows) >= snapshot_offset + 599 or time.monotonic() > deadline:
                break
    finally:
        query.stop()
    assert {r.offset for r in first} == live_before
    offsets = [r.offset for r in rows]
    assert len(offsets) == len(set(offsets)), "an event twice"
    assert sorted(o for o in offsets if o >= snapshot_offset) == list(
        range(snapshot_offset, snapshot_offset + 600)), "an event of the log missed"
    model = _apply([type("Row", (), {"offset": r[2], "opcode": r[7], "source": r[6],
                                     "key_long": r[3], "value": r[8]})
                    for r in topics.expected(topic)])
    assert _apply(rows) == model


def test_stream_restarted_before_its_snapshot_batch_was_committed(topics: Any,
                                                                  tmp_path: Path) -> None:
    """Spark asks initialOffset again on such a restart and gets the view's offset
    now, past the end the batch was planned with: the old code read the snapshot as
    of it, and the next batch read the events between again (each twice)."""
    from pyspark.errors import StreamingQueryException

    topic = topics.make("spark-snapshot-restart")
    _produce_history(topics, topic, 0, 0, rounds=1)  # keys 0..299 at 0..299, every 7th a DELETE
    _wait_views(topics, topic, 1)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    stream = (topics.spark.readStream.format("keybus").option("broker", topics.address)
              .option("topic", topic).option("startingOffsets", "snapshot").load()
              .select("offset", "key_long"))

    def fail(batch: Any, batch_id: int) -> None:
        raise RuntimeError("the sink fails: batch 0 is planned, not committed")

    query = stream.writeStream.foreachBatch(fail).option("checkpointLocation",
                                                         str(checkpoint)).start()
    try:
        with pytest.raises(StreamingQueryException):
            query.awaitTermination(60)
    finally:
        query.stop()
    _produce_history(topics, topic, 0, 150, rounds=1)  # keys 150..449 at offsets 300..599
    _wait_views(topics, topic, 1)
    query = (stream.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    offsets = sorted(r.offset for r in topics.spark.read.parquet(str(out)).collect())
    assert len(offsets) == len(set(offsets)), "an event twice"
    assert [o for o in offsets if o >= 300] == list(range(300, 600)), "an event of the log missed"
    assert {o for o in offsets if o < 300} <= {k for k in range(300) if k % 7}  # live keys
