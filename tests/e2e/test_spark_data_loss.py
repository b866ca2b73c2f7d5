"""A streaming query restarted after retention removed events its checkpoint needs.

Goal: what failOnDataLoss exists for. With the default (true) the restarted
query fails within a bounded time when it plans the micro-batch (on the
driver, before a task reads), and the error the user gets names the offsets
that are gone and says failOnDataLoss=false skips them. With false
it goes on from the earliest stored offset: the output holds every event the
first run wrote plus every event still stored, each once, and a key's events
in offset order within what one task wrote.
Method: a broker process of its own (retention checked every 50 ms) and a
2-partition topic with a small retention_bytes and no compacted view (the
view would hold retention back). A query (ranges=2) reads the first round of
records to parquet with a checkpoint and stops; a second round pushes the
partitions over retention_bytes so their start moves past the checkpointed
offsets; the query is restarted on the same checkpoint (with failOnDataLoss=false
and a maxEventsPerTrigger that makes its first micro-batches lie wholly in the
gap, the case where the earliest stored offset is past a micro-batch's end).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk.core.pb import keybus_pb2 as pb
from tests.e2e.conftest import Topics
from tests.support.broker_process import BrokerProcess
from tests.support.wire import int_batch

pytestmark = pytest.mark.spark

PARTITIONS = 2
EVENTS_PER_RECORD = 50
FIRST_RECORDS = 3  # about 1,600 bytes per partition: under retention_bytes
SECOND_RECORDS = 9  # about 6,500 bytes in all: retention keeps the newest ~4,000
RETENTION_BYTES = 4_000
KEYS = 10


@pytest.fixture(scope="module")
def trimming(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topics]:
    """Topics on a broker whose retention runs every 50 ms."""
    broker = BrokerProcess(Path(tmp_path_factory.mktemp("spark-data-loss")) / "data",
                           "--retention-check-interval-ms", "50")
    broker.start()
    yield Topics(spark, broker)
    broker.stop()


def _make(topics: Topics, name: str) -> str:
    topics.stub.CreateTopic(pb.CreateTopicRequest(topic=name, config=pb.TopicConfig(
        partitions=PARTITIONS, retention_bytes=RETENTION_BYTES, view=pb.VIEW_OFF)), timeout=10)
    return name


def _produce(topics: Topics, name: str, records: range) -> None:
    keys = [i % KEYS for i in range(EVENTS_PER_RECORD)]
    for r in records:
        for p in range(PARTITIONS):
            topics.produce(name, p, int_batch(keys, f"r{r}-".encode()))


def _partitions(topics: Topics, name: str) -> list[pb.PartitionInfo]:
    info = topics.stub.DescribeTopic(pb.DescribeTopicRequest(topic=name), timeout=10)
    return list(info.partitions)


def _starts(topics: Topics, name: str) -> list[int]:
    return [p.start_offset for p in _partitions(topics, name)]


def _trimmed(topics: Topics, name: str) -> list[int]:
    """Wait (bounded) until retention is done with the produced records: every
    partition back within retention_bytes (no pass trims more then); its starts."""
    deadline = time.monotonic() + 20
    parts = _partitions(topics, name)
    while any(p.bytes > RETENTION_BYTES for p in parts):
        assert time.monotonic() < deadline, f"retention did not trim {name}: {parts}"
        time.sleep(0.05)
        parts = _partitions(topics, name)
    return [p.start_offset for p in parts]


def _start(topics: Topics, name: str, out: Path, checkpoint: Path, **options: str) -> Any:
    stream = (topics.spark.readStream.format("keybus").option("broker", topics.address)
              .option("topic", name).option("ranges", "2").option("startingOffsets", "earliest")
              .options(**options).load())
    return (stream.select("partition", "offset", "key_long", "value").writeStream
            .format("parquet").option("path", str(out))
            .option("checkpointLocation", str(checkpoint)).start())


def _first_run(topics: Topics, name: str, out: Path, checkpoint: Path, **options: str) -> int:
    """Read the first round to the checkpoint and stop; then trim past it.
    Returns the offset (per partition) the checkpoint resumes at."""
    _produce(topics, name, range(FIRST_RECORDS))
    query = _start(topics, name, out, checkpoint, **options)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    resume = FIRST_RECORDS * EVENTS_PER_RECORD
    assert _starts(topics, name) == [0] * PARTITIONS  # nothing trimmed yet
    _produce(topics, name, range(FIRST_RECORDS, FIRST_RECORDS + SECOND_RECORDS))
    assert min(_trimmed(topics, name)) > resume  # the trim took events the checkpoint needs
    return resume


def test_restart_after_retention_fails_and_says_what_was_lost(trimming: Topics,
                                                              tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    name = _make(trimming, "spark-data-loss-fail")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    resume = _first_run(trimming, name, out, checkpoint)
    starts = _starts(trimming, name)
    query = _start(trimming, name, out, checkpoint)
    try:
        with pytest.raises(StreamingQueryException) as caught:
            query.awaitTermination(60)  # bounded: still running after 60 s fails the test
    finally:
        query.stop()
    message = str(caught.value)
    assert "failOnDataLoss=false" in message, message
    assert "planPartitions" in message, message  # found on the driver, no task ran
    # What is gone: from the checkpoint's offset up to the earliest still stored.
    lost = [f"{name}/{p}: offsets {resume}..{starts[p] - 1} are no longer stored (retention "
            f"removed them; the earliest is {starts[p]})" for p in range(PARTITIONS)]
    assert any(text in message for text in lost), message


def test_restart_after_retention_skips_to_earliest_without_duplicates(trimming: Topics,
                                                                      tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    name = _make(trimming, "spark-data-loss-skip")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    resume = _first_run(trimming, name, out, checkpoint, failOnDataLoss="false")
    # 50 offsets per partition per micro-batch: the first two lie wholly in the gap.
    query = _start(trimming, name, out, checkpoint, failOnDataLoss="false",
                   maxEventsPerTrigger="100")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    written = trimming.spark.read.parquet(str(out))
    got = sorted((r.partition, r.offset) for r in written.collect())
    stored = [(row[1], row[2]) for row in trimming.expected(name, PARTITIONS)]
    first_run = [(p, o) for p in range(PARTITIONS) for o in range(resume)]
    assert got == sorted(first_run + stored)  # each once: none lost that is stored, none twice
    for path in written.inputFiles():  # one task's output: each key in offset order
        table = pq.read_table(path.removeprefix("file://")).to_pylist()
        for key in range(KEYS):
            offsets = [(r["partition"], r["offset"]) for r in table if r["key_long"] == key]
            assert offsets == sorted(offsets), path
