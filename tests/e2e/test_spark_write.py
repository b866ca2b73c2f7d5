"""Writes: df.write / df.writeStream .format("keybus"), and retries that store nothing twice.

Goal: what a write stores reads back equal, column by column; a retried
task or a re-run micro-batch does not duplicate events when it sends the
same batches, and loses nothing when it does not. Method: batch-write rows
of every supported column type and read them back; drive `TaskProducer`
(the SDK producer under the task's producer id) directly as two attempts
of one task would (same producer id, same or changed batches); re-run a streaming micro-batch by deleting its commit
from the checkpoint and count the target topic.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from spark_connector.task_producer import EventColumns, TaskProducer, task_producer_id

pytestmark = pytest.mark.spark

UTC = dt.UTC


def test_write_then_read_returns_what_was_written(spark: Any, topics: Any) -> None:
    topic = topics.make("spark-write-roundtrip", partitions=3)
    rows = [(i, None, f"g{i % 4}" if i % 2 else None, "orders" if i % 3 else None,
             "DELETE" if i % 5 == 0 else "UPSERT", b"value-%d" % i,
             {"h": b"%d" % i} if i % 7 == 0 else None,
             dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=i))
            for i in range(200)]
    rows += [(None, f"user-{i}", None, None, "UPSERT", b"s", None, None) for i in range(50)]
    schema = ("key_long long, key_string string, ordering_key string, source string, "
              "opcode string, value binary, headers map<string,binary>, event_time timestamp")
    spark.createDataFrame(rows, schema).repartition(2).write.format("keybus") \
        .option("broker", topics.address).option("topic", topic).mode("append").save()

    read = topics.reader(topic, includeHeaders="true").load()
    got = [(r.key_long, r.key_string, r.ordering_key, r.source, r.opcode, bytes(r.value),
                  {k: bytes(v) for k, v in r.headers.items()} if r.headers else None,
                  r.event_time.replace(tzinfo=UTC) if r.event_time else None)
           for r in read.collect()]
    assert sorted(got, key=_sort_key) == sorted(rows, key=_sort_key)
    # Routed by slot % partitions, as the SDK producer routes.
    assert {r.partition for r in read.collect()} == {0, 1, 2}
    assert all(r.slot % 3 == r.partition for r in read.collect())


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, v if not isinstance(v, dict) else sorted(v.items())) for v in row)


def test_copy_a_topic_with_a_read_dataframe(spark: Any, topics: Any) -> None:
    source = topics.make("spark-write-copy-source", partitions=2)
    target = topics.make("spark-write-copy-target", partitions=2)
    for p in range(2):
        topics.produce_ints(source, p, list(range(p * 1000, p * 1000 + 300)))
    topics.reader(source).load().write.format("keybus").option("broker", topics.address) \
        .option("topic", target).mode("append").save()
    copied = sorted((r[1], r[3], r[8]) for r in topics.expected(target, partitions=2))
    original = sorted((r[1], r[3], r[8]) for r in topics.expected(source, partitions=2))
    assert copied == original  # same partition (the partition column), key and value


def _batch(keys: list[int], tag: bytes = b"v") -> EventColumns:
    return EventColumns(list(keys), [tag + str(k).encode() for k in keys])


def test_a_retried_task_stores_nothing_twice(topics: Any) -> None:
    topic = topics.make("spark-write-retry")
    producer_id = task_producer_id("write-1", 0)
    batches = [_batch(list(range(i * 10, i * 10 + 10))) for i in range(3)]
    first = TaskProducer(topics.address, producer_id, in_flight_max=2)
    for b in batches[:2]:  # the first attempt dies after two batches
        first.send(topic, 0, b)
    first.finish()
    retry = TaskProducer(topics.address, producer_id, in_flight_max=2)
    for b in batches:
        retry.send(topic, 0, b)
    stats = retry.finish()
    assert (stats.events, stats.duplicates, stats.resent) == (30, 20, 0)
    assert [row[3] for row in topics.expected(topic)] == list(range(30))


def test_a_retry_with_changed_input_resends_rather_than_drops(topics: Any) -> None:
    topic = topics.make("spark-write-changed")
    producer_id = task_producer_id("write-2", 0)
    first = TaskProducer(topics.address, producer_id, in_flight_max=4)
    first.send(topic, 0, _batch([1, 2, 3]))
    first.send(topic, 0, _batch([4, 5, 6]))
    first.finish()
    retry = TaskProducer(topics.address, producer_id, in_flight_max=4)
    retry.send(topic, 0, _batch([1, 2, 3]))  # same as before: a verified duplicate
    retry.send(topic, 0, _batch([6, 5, 4]))  # same sequence, other order: sent again
    stats = retry.finish()
    assert (stats.duplicates, stats.resent) == (3, 3)
    assert [row[3] for row in topics.expected(topic)] == [1, 2, 3, 4, 5, 6, 6, 5, 4]


def test_a_sequence_the_broker_forgot_is_resent(topics: Any) -> None:
    topic = topics.make("spark-write-too-old")
    producer_id = task_producer_id("write-3", 0)
    first = TaskProducer(topics.address, producer_id, in_flight_max=8)
    for i in range(70):  # the broker keeps the last 64 results per producer
        first.send(topic, 0, _batch([i]))
    first.finish()
    retry = TaskProducer(topics.address, producer_id, in_flight_max=8)
    retry.send(topic, 0, _batch([0]))
    stats = retry.finish()
    assert (stats.duplicates, stats.resent) == (0, 1)  # outcome unknown: at-least-once


@pytest.mark.parametrize("idempotence, expected", [("task", 300), ("attempt", 400)])
def test_a_rerun_micro_batch_is_not_written_twice(topics: Any, tmp_path: Path,
                                                  idempotence: str, expected: int) -> None:
    source = topics.make(f"spark-write-stream-source-{idempotence}")
    target = topics.make(f"spark-write-stream-target-{idempotence}", partitions=2)
    topics.produce_ints(source, 0, list(range(300)))
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        stream = (topics.spark.readStream.format("keybus").option("broker", topics.address)
                  .option("topic", source).option("startingOffsets", "earliest")
                  .option("maxEventsPerTrigger", "100").load())
        query = (stream.select("key_long", "value").writeStream.format("keybus")
                 .option("broker", topics.address).option("topic", target)
                 .option("writeIdempotence", idempotence)
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        assert query.awaitTermination(60)
        assert query.exception() is None

    run()
    # As if the driver died after the last micro-batch wrote but before it committed.
    (checkpoint / "commits" / "2").unlink()
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)
    run()
    keys = [row[3] for row in topics.expected(target, partitions=2)]
    assert len(keys) == expected
    assert set(keys) == set(range(300))


def test_a_retried_task_with_every_column_stores_nothing_twice(topics: Any) -> None:
    topic = topics.make("spark-write-retry-columns", partitions=2)
    producer_id = task_producer_id("write-4", 3)
    batch = EventColumns([1, "k2", 3], [b"a", b"b", b"c"], ["o1", "", "o3"],
                         ["orders", "", "users"], [0, 1, 0], [{"h": b"1"}, {}, {}],
                         [1_700_000_000_000, 0, 5])
    for attempt in range(2):
        producer = TaskProducer(topics.address, producer_id, in_flight_max=2)
        producer.send(topic, 1, batch)
        stats = producer.finish()
        assert (stats.events, stats.duplicates) == (3, 3 * attempt)
    rows = topics.expected(topic, partitions=2)
    assert [(r[1], r[3] if r[3] is not None else r[4], r[5], r[6], r[7], r[12])
            for r in rows] == [(1, 1, "o1", "orders", "UPSERT", 1_700_000_000_000),
                               (1, "k2", None, None, "DELETE", None),
                               (1, 3, "o3", "users", "UPSERT", 5)]
