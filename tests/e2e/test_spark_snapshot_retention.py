"""startingOffsets=snapshot: retention removes the log a snapshot micro-batch needs
after the batch was planned, while (or before) its task reads.

Goal: with failOnDataLoss=false no event is delivered twice, and only events
retention removed are skipped: every event still stored is delivered, and a key
that is in the view keeps its latest value. With true the query fails and says
why and what to set. The old code read a new snapshot of the view *now* with no
log after it: events the next batch read again (twice), events of the batch
still stored but superseded after its end never (skipped), and, after a broken
stream, keys the task had already handed to Spark again.
Method: a broker of its own whose compacted view folds exactly 60 events per
pass and otherwise waits (view_linger_ms of 10 minutes), so the view offset,
and with it the retention floor, moves only when the test produces a full
pass; retention_bytes keeps about seven 10-event records (records are 162-180
bytes), checked every 50 ms. The log start a test reaches is asserted, not
assumed. The Spark test plans batch 0 (snapshot as of 60, log up to 110), and
its foreachBatch function makes retention trim to 100 before it collects the
rows (the task reads after that). The task tests read a split without Spark,
take part of it, kill -9 the broker and restart it (pins are in memory), let
retention trim, and read the rest: the stream's resume meets the removed log
in the snapshot, and in the catch-up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk.core.model import FULL_RANGE
from sdk.core.pb import keybus_pb2 as pb
from tests.support import wire
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.spark

PASS_EVENTS = 60
RETENTION_BYTES = 1_500  # seven records of 10 events (about 203 bytes each, stored)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(Path(tmp_path_factory.mktemp("spark-snapshot-retention")) / "data",
                            "--retention-check-interval-ms", "50",
                            "--view-pass-events-max", str(PASS_EVENTS),
                            "--view-linger-ms", "600000", "--view-pass-bytes-max", "100000000")
    process.start()
    yield process
    process.stop()


def _make(broker: BrokerProcess, topic: str, retention_bytes: int = RETENTION_BYTES) -> None:
    wire.stub(broker.address).CreateTopic(pb.CreateTopicRequest(topic=topic, config=pb.TopicConfig(
        partitions=1, retention_bytes=retention_bytes, view=pb.VIEW_ON)), timeout=10)


def _produce(broker: BrokerProcess, topic: str, keys: range, tag: bytes, per: int = 10,
             width: int = 6) -> None:
    """`keys` in records of `per` events, each value `tag` and the key, `width` bytes."""
    stub = wire.stub(broker.address)
    for first in range(keys.start, keys.stop, per):
        part = list(range(first, min(first + per, keys.stop)))
        batch = pb.EventBatch(count=len(part), key_ints=part, slots=wire.slots_of(part),
                              values=[(tag + b"%05d" % k).ljust(width, b".") for k in part])
        (response,) = wire.produce(stub, [pb.ProduceRequest(topic=topic, partition=0,
                                                            batch=batch)])
        assert response.error_code == 0, response.error_message


def _settled(broker: BrokerProcess, topic: str, view_offset: int,
             retention_bytes: int = RETENTION_BYTES) -> pb.PartitionInfo:
    """Wait (bounded) until the view reached `view_offset` (or passed it) and retention
    is done (the partition back within retention_bytes); the partition then."""
    deadline = time.monotonic() + 60
    while True:
        p = wire.stub(broker.address).DescribeTopic(pb.DescribeTopicRequest(topic=topic),
                                                    timeout=10).partitions[0]
        if p.view_offset >= view_offset and p.bytes <= retention_bytes:
            return p
        assert time.monotonic() < deadline, f"view or retention did not settle: {p}"
        time.sleep(0.05)


def _query(spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path, fail: str,
           trim: Any) -> list[int]:
    """Offsets a snapshot-start query delivered, batch after batch; `trim` runs in
    batch 0's foreachBatch function, after planning, before the task reads."""
    delivered: list[int] = []

    def sink(batch: Any, batch_id: int) -> None:
        if batch_id == 0:
            trim()
        delivered.extend(r.offset for r in batch.collect())

    stream = (spark.readStream.format("keybus").option("broker", broker.address)
              .option("topic", topic).option("startingOffsets", "snapshot")
              .option("failOnDataLoss", fail).load())
    query = stream.writeStream.foreachBatch(sink).option(
        "checkpointLocation", str(tmp_path / "checkpoint")).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return delivered


def _history(broker: BrokerProcess, topic: str) -> None:
    """Keys 0..59 at offsets 0..59 (one view pass: the view holds them), keys
    60..109 at 60..109 (less than a pass: the view waits at 60)."""
    _make(broker, topic)
    _produce(broker, topic, range(60), b"a")
    _settled(broker, topic, 60)
    _produce(broker, topic, range(60, 110), b"a")


def _trim_to_100(broker: BrokerProcess, topic: str) -> None:
    """Keys 100..109 again at 110..119, new keys 200..249 at 120..169: the view folds
    60..119 and retention trims the log to 100, past the batch's snapshot offset (60)."""
    _produce(broker, topic, range(100, 110), b"b")
    _produce(broker, topic, range(200, 250), b"b")
    assert _settled(broker, topic, 120).start_offset == 100


def test_stream_goes_on_past_log_removed_before_its_task_read(spark: Any, broker: BrokerProcess,
                                                              tmp_path: Path) -> None:
    topic = "snapshot-trimmed-before-read"
    _history(broker, topic)
    delivered = _query(spark, broker, topic, tmp_path, "false",
                       lambda: _trim_to_100(broker, topic))
    assert len(delivered) == len(set(delivered)), "an event twice"
    # Batch 0: the snapshot as of 100 (0..99: the view keeps 60..99, whose log is gone)
    # and the log 100..109, still stored; batch 1: 110..169. Nothing is skipped: every
    # removed event is still its key's latest in the view.
    assert sorted(delivered) == list(range(170))


def test_stream_fails_with_fail_on_data_loss_true(spark: Any, broker: BrokerProcess,
                                                  tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    topic = "snapshot-trimmed-fails"
    _history(broker, topic)
    with pytest.raises((StreamingQueryException, Exception)) as caught:
        _query(spark, broker, topic, tmp_path, "true", lambda: _trim_to_100(broker, topic))
    message = str(caught.value)
    assert (f"{topic}/0: the snapshot as of offset 60 and the log up to offset 110, which "
            "this task read: retention removed log it needs while it read") in message, message
    assert "Set failOnDataLoss=false to skip the events retention removed" in message, message


@pytest.fixture
def split_reader(broker: BrokerProcess) -> Iterator[Callable[..., Iterator[Any]]]:
    """Makes readers of a first micro-batch's split, as a Spark task reads it (no Spark:
    the test pulls its Arrow batches of about `events_max` events one by one), with
    failOnDataLoss=false; closes them (and their connections) at the end."""
    pytest.importorskip("pyspark")
    from spark_connector.partitioning import Split
    from spark_connector.schema import arrow_schema, spark_schema
    from spark_connector.task_read import KeybusSnapshotPartition, read_snapshot_split

    made: list[Generator[Any, None, None]] = []

    def make(topic: str, snapshot_offset: int, stop: int, events_max: int) -> Iterator[Any]:
        split = Split(topic, 0, (FULL_RANGE,), snapshot_offset, stop)
        partition = KeybusSnapshotPartition(split, broker.address, None, events_max, False,
                                            snapshot_offset)
        made.append(read_snapshot_split(partition, arrow_schema(spark_schema(False))))
        return made[-1]

    yield make
    for reader in made:
        reader.close()


def _offsets(batches: Any) -> list[int]:
    return [o for batch in batches for o in batch.column("offset").to_pylist()]


def _read_before_resume(delivered: list[int], span: range) -> int:
    """The offset up to which `delivered` holds all of `span` and nothing after (what
    the reader had received before the broker died: gRPC may hold a few MB that the
    test had not pulled yet)."""
    got = [o for o in span if o in delivered]
    assert got == list(range(span.start, span.start + len(got))), got
    return span.start + len(got)


def test_task_resumed_in_its_snapshot_after_retention_reads_no_key_twice(
        broker: BrokerProcess, split_reader: Callable[..., Iterator[Any]]) -> None:
    topic = "snapshot-resumed-in-snapshot"
    _make(broker, topic)
    # Keys 0..59 of 400 kB (24 MB, one pass: the view holds them; retention then
    # removes them from the log), keys 60..109 small (less than a pass: the view waits).
    _produce(broker, topic, range(60), b"a", per=1, width=400_000)
    _settled(broker, topic, 60, 10**9)
    _produce(broker, topic, range(60, 110), b"a")
    batches = split_reader(topic, 60, 110, 10)
    first = _offsets([next(batches)])  # keys 0..9 of the snapshot
    assert first == list(range(10)), first
    broker.restart()  # the read's pin is gone
    _produce(broker, topic, range(50, 60), b"b")  # keys 50..59 again at 110..119
    _produce(broker, topic, range(200, 250), b"b")  # new keys at 120..169
    assert _settled(broker, topic, 120).start_offset == 100  # the snapshot as of 60 is gone
    delivered = first + _offsets(batches)
    assert len(delivered) == len(set(delivered)), "an event twice"
    # The snapshot goes on after the last key the reader had as of 100: keys 50..59 not
    # read yet are past it (their new events come with the next batch); keys 60..99 come
    # from the view (the log of them is gone), then the log 100..109.
    read_to = _read_before_resume(delivered, range(10, 60))
    assert read_to < 60, "the whole snapshot came before the broker died"
    assert sorted(delivered) == [*range(read_to), *range(60, 110)]


def test_task_resumed_in_its_catch_up_after_retention_skips_only_removed_events(
        broker: BrokerProcess, split_reader: Callable[..., Iterator[Any]]) -> None:
    topic = "snapshot-resumed-in-catch-up"
    retention_bytes = 900_000  # the newest two 400 kB records
    _make(broker, topic, retention_bytes)
    _produce(broker, topic, range(60), b"a")
    _settled(broker, topic, 60, 10**9)
    # 50 events of 400 kB, one per record: 20 MB, more than gRPC holds for a reader that
    # does not read on (a few MB), so the catch-up is still unsent when the broker dies.
    _produce(broker, topic, range(60, 110), b"a", per=1, width=400_000)
    batches = split_reader(topic, 60, 110, 10)
    first = _offsets([next(batches) for _ in range(7)])  # the snapshot, then 60..69
    read_to = max(first) + 1
    assert read_to == 70, read_to
    broker.restart()
    _produce(broker, topic, range(110, 170), b"b")  # a pass: the view folds 60..119
    start = _settled(broker, topic, 120, retention_bytes).start_offset
    assert start == 108, start
    delivered = first + _offsets(batches)
    assert len(delivered) == len(set(delivered)), "an event twice"
    # What the reader had before the broker died, then the log from where retention
    # left it: the events between are gone, 108 and 109 are stored and read.
    read_to = _read_before_resume(delivered, range(70, 108))
    assert read_to < 108, "the whole catch-up came before the broker died"
    assert sorted(delivered) == [*range(read_to), 108, 109]
