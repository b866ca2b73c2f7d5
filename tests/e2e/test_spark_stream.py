"""Streaming reads: checkpointed offsets, admission control, Trigger.AvailableNow.

Goal: a streaming query that is stopped and restarted from its checkpoint
while events keep arriving ends with every event exactly once, and no
micro-batch admits more than maxEventsPerTrigger events. Method: a thread
produces events into a 2-partition topic during the whole test; the query
(ranges=2, so 4 splits per micro-batch) writes to parquet with a
checkpoint, is stopped after some progress, restarted on the same
checkpoint, then drained with processAllAvailable once the producer is
done; the parquet rows are compared with the topic's (partition, offset) set.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

EVENTS_PER_TRIGGER = 700


def _start(topics: Any, topic: str, out: Path, checkpoint: Path) -> Any:
    stream = (topics.spark.readStream.format("keybus").option("broker", topics.address)
              .option("topic", topic).option("ranges", "2").option("startingOffsets", "earliest")
              .option("maxEventsPerTrigger", str(EVENTS_PER_TRIGGER)).load())
    return (stream.select("partition", "offset", "key_long", "slot").writeStream
            .format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


def _wait_for(condition: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _input_rows(query: Any) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)


def test_restarted_query_gets_every_event_exactly_once(topics: Any, tmp_path: Path) -> None:
    topic = topics.make("spark-stream-restart", partitions=2)
    for p in range(2):
        topics.produce_ints(topic, p, list(range(p * 100_000, p * 100_000 + 1000)))
    stop_producing = threading.Event()
    rounds = [0]

    def keep_producing() -> None:
        while not stop_producing.is_set():
            i = rounds[0]
            topics.produce_ints(topic, i % 2, list(range(10_000 + i * 50, 10_000 + i * 50 + 50)))
            rounds[0] += 1
            time.sleep(0.02)

    producer = threading.Thread(target=keep_producing)
    producer.start()
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    try:
        query = _start(topics, topic, out, checkpoint)
        _wait_for(lambda: _input_rows(query) >= 1500)
        progress = list(query.recentProgress)
        query.stop()
        rounds_at_stop = rounds[0]
        query = _start(topics, topic, out, checkpoint)
        _wait_for(lambda: _input_rows(query) >= 1000 and rounds[0] >= rounds_at_stop + 20)
    finally:
        stop_producing.set()
        producer.join()
    query.processAllAvailable()
    progress += list(query.recentProgress)
    query.stop()
    assert max(p["numInputRows"] for p in progress) <= EVENTS_PER_TRIGGER
    rows = topics.spark.read.parquet(str(out)).collect()
    got = sorted((r.partition, r.offset) for r in rows)
    want = sorted((row[1], row[2]) for row in topics.expected(topic, partitions=2))
    assert len(want) == 2000 + 50 * rounds[0]
    assert got == want  # every event, none twice


def test_available_now_reads_what_was_there_and_stops(topics: Any, tmp_path: Path) -> None:
    topic = topics.make("spark-stream-available-now")
    topics.produce_ints(topic, 0, list(range(1500)))
    stream = (topics.spark.readStream.format("keybus").option("broker", topics.address)
              .option("topic", topic).option("startingOffsets", "earliest")
              .option("maxEventsPerTrigger", "400").load())
    query = (stream.writeStream.format("memory").queryName("available_now")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(60)
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert batches == [400, 400, 400, 300]
    assert topics.spark.sql("SELECT count(*) AS n FROM available_now").first().n == 1500


def test_streaming_starts_at_latest_by_default(topics: Any, tmp_path: Path) -> None:
    topic = topics.make("spark-stream-latest")
    topics.produce_ints(topic, 0, list(range(100)))
    stream = (topics.spark.readStream.format("keybus").option("broker", topics.address)
              .option("topic", topic).load())
    query = (stream.writeStream.format("memory").queryName("from_latest")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
        topics.produce_ints(topic, 0, list(range(100, 130)))
        query.processAllAvailable()
        keys = sorted(r.key_long for r in topics.spark.sql("SELECT key_long FROM from_latest")
                      .collect())
    finally:
        query.stop()
    assert keys == list(range(100, 130))
