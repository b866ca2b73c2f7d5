"""Filter pushdown: narrower reads, and never a wrong count when a DataFrame is reused.

Goal: conditions on key_long/key_string/ordering_key/slot/partition/offset
narrow what the broker sends, and no sequence of queries on one DataFrame
gives a count other than Spark's own answer. PySpark 4.3 keeps the reader
of the last query that pushed filters on the DataFrame's relation and
reuses it for a later query without pushable filters (a plain count), so
the test runs filtered and unfiltered queries in both orders, on both kinds
of DataFrame: spark.read (pushdown off) and spark_connector.load (guarded).
Method: compare every count with the same query over the rows collected
into a plain local DataFrame (no keybus reader involved).
"""

from __future__ import annotations

from typing import Any

import pytest

import spark_connector
from sdk.core.hashing import slot_of
from sdk.core.pb import keybus_pb2 as pb

pytestmark = pytest.mark.spark

QUERIES = [
    "key_long = 5",
    None,
    "key_long IN (7, 1003, 2999, -3)",
    "key_string = 'k-17'",
    None,
    "ordering_key = 'g-3'",
    "slot >= 30000 AND slot < 40000",
    "partition = 1 AND offset >= 100 AND offset < 140",
    "key_long = 5 OR key_long = 6",  # not pushable (OR): Spark alone
    None,
    "offset = 7",
    "key_long = 5",
    None,
]


@pytest.fixture(scope="module")
def pushdown_topic(topics: Any) -> str:
    name = topics.make("spark-pushdown", partitions=2)
    for p in range(2):
        topics.produce_ints(name, p, [*range(p * 2000, p * 2000 + 1500), -3])
    strings = [f"k-{i}" for i in range(40)]
    ordering = [f"g-{i % 5}" for i in range(40)]
    batch = pb.EventBatch(count=40, key_strings=strings, ordering_keys=ordering,
                          slots=[slot_of(o) for o in ordering], values=[b"s"] * 40)
    topics.produce(name, 1, batch)
    return name


def _local_copy(spark: Any, df: Any) -> Any:
    return spark.createDataFrame(df.select("key_long", "key_string", "ordering_key", "slot",
                                           "partition", "offset").collect())


@pytest.mark.parametrize("guarded", [False, True], ids=["spark.read", "spark_connector.load"])
def test_reused_dataframe_never_gives_a_wrong_count(spark: Any, topics: Any,
                                                    pushdown_topic: str, guarded: bool) -> None:
    if guarded:
        df = spark_connector.load(spark, broker=topics.address, topic=pushdown_topic, ranges="4")
    else:
        df = topics.reader(pushdown_topic, ranges="4").load()
    truth = _local_copy(spark, topics.reader(pushdown_topic).load())
    total = truth.count()
    assert total == 2 * 1501 + 40
    for condition in QUERIES:
        got = df.count() if condition is None else df.where(condition).count()
        want = total if condition is None else truth.where(condition).count()
        assert got == want, f"{condition or 'no condition'}: keybus {got}, Spark {want}"


def test_guarded_pushdown_narrows_the_read(spark: Any, topics: Any, pushdown_topic: str) -> None:
    df = spark_connector.load(spark, broker=topics.address, topic=pushdown_topic, ranges="4")
    assert df.rdd.getNumPartitions() == 2 * 4
    # One partition, offsets 100..139: only that partition's 4 range splits.
    assert df.where("partition = 1 AND offset < 140").rdd.getNumPartitions() == 4
    # An ordering key names one slot: one split per topic partition.
    assert df.where("ordering_key = 'g-3'").rdd.getNumPartitions() == 2
    # A contradiction reads nothing.
    assert df.where("slot = 70000").count() == 0
    assert df.where("key_long = 5").count() == 1
    # Unfiltered again: the whole topic, not the last query's narrowed read.
    assert df.count() == 2 * 1501 + 40


def test_pushdown_off_reads_the_snapshot_it_planned(spark: Any, topics: Any) -> None:
    """spark.read DataFrames never narrow, so reuse is safe; they keep the
    offsets resolved when first planned (PySpark caches the read plan)."""
    name = topics.make("spark-pushdown-snapshot")
    topics.produce_ints(name, 0, list(range(10)))
    df = topics.reader(name).load()
    assert df.where("key_long = 3").count() == 1
    assert df.count() == 10
    topics.produce_ints(name, 0, list(range(10, 20)))
    assert df.count() == 10  # the planned snapshot
    assert topics.reader(name).load().count() == 20  # a new load sees the new events
    guarded = spark_connector.load(spark, broker=topics.address, topic=name)
    assert guarded.count() == 20
    topics.produce_ints(name, 0, [20])
    assert guarded.count() == 21  # guarded DataFrames plan every query afresh


def test_key_conditions_become_a_broker_filter(topics: Any, pushdown_topic: str) -> None:
    """The reader's own view: which filters go back to Spark and what each task asks for."""
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In

    from spark_connector.source import KeybusDataSource

    source = KeybusDataSource({"broker": topics.address, "topic": pushdown_topic,
                               "ranges": "4", "pushdown": "guarded"})
    reader = source.reader(source.schema())
    guard = GreaterThanOrEqual(("offset",), 0)
    key = In(("key_long",), (5, 2999))
    ordering = EqualTo(("ordering_key",), "g-1")
    back = reader.pushFilters([guard, key, ordering])
    assert back == [key, ordering]  # Spark checks these again; the guard is exact
    partitions = reader.partitions()
    assert len(partitions) == 2  # the slot of "g-1", in each topic partition
    (key_filter,) = {p.key_filter for p in partitions}
    spec = pb.KeyFilter.FromString(key_filter)
    assert spec.type == pb.KeyFilter.RANGE and spec.range_partitions == "[5,2999]"
    assert all(p.split.ranges[0].slot_first == slot_of("g-1") for p in partitions)
    rows = [r for p in partitions for batch in reader.read(p) for r in batch.to_pylist()]
    assert rows == []  # keys 5 and 2999 do not have ordering key g-1

    unguarded = source.reader(source.schema())
    assert unguarded.pushFilters([key]) == [key]
    assert len(unguarded.partitions()) == 2 * 4


def test_plain_reads_work_with_pushdown_disabled(topics: Any) -> None:
    """PySpark refuses a reader that defines pushFilters while
    spark.sql.python.filterPushdown.enabled is false: plain reads must not define it."""
    from pyspark.sql.datasource import DataSourceReader

    from spark_connector.source import KeybusDataSource

    source = KeybusDataSource({"broker": topics.address, "topic": "any"})
    reader = source.reader(source.schema())
    assert type(reader).pushFilters is DataSourceReader.pushFilters
