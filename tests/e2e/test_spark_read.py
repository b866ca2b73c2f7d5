"""Batch reads through spark.read.format("keybus") against a real broker.

Goal: a batch read returns exactly the topic's events, with every column as
the log holds it, however the read is split. Method: produce batches of
every shape the wire allows (int keys, string keys with ordering keys,
per-event and broadcast optional columns, a window with mixed keys, headers)
over raw gRPC, read them back with Spark, and compare row by row with what a
raw Read of the log returns.
"""

from __future__ import annotations

from typing import Any

import pytest

from sdk.core.hashing import slots_of
from sdk.core.model import equal_splits
from sdk.core.pb import keybus_pb2 as pb

pytestmark = pytest.mark.spark


def _rich_batches() -> list[tuple[int, pb.EventBatch, bool, int]]:
    """(partition, batch, window, scn) covering the column shapes."""
    strings = [f"user-{i}" for i in range(300)]
    ordering = [f"tenant-{i % 7}" if i % 3 else "" for i in range(300)]
    mixed_strings = ["", "alpha", "", "beta"]
    return [
        (0, pb.EventBatch(count=500, key_ints=list(range(500)),
                          values=[b"v%d" % i for i in range(500)]), False, 0),
        (1, pb.EventBatch(count=300, key_strings=strings, ordering_keys=ordering,
                          slots=slots_of([o or k for o, k in zip(ordering, strings, strict=True)]),
                          values=[s.encode() for s in strings], sources=["orders"],
                          opcodes=[i % 2 for i in range(300)],
                          event_times_ms=[1_700_000_000_000 + i for i in range(300)],
                          headers=[pb.Headers(entries={"h": b"x"})]), False, 0),
        (0, pb.EventBatch(count=4, key_ints=[-5, 6, 7, 8], key_strings=mixed_strings,
                          values=[b"a", b"b", b"c", b"d"], sources=["s1", "s2", "", "s1"],
                          event_times_ms=[1_600_000_000_000]), True, 10_000),
        (1, pb.EventBatch(count=200, key_ints=list(range(1000, 1200)), ordering_keys=["same"],
                          values=[b""] * 200, opcodes=[pb.DELETE]), False, 0),
    ]


@pytest.fixture(scope="module")
def rich(topics: Any) -> str:
    name = topics.make("spark-read-rich", partitions=2)
    for partition, batch, window, scn in _rich_batches():
        topics.produce(name, partition, batch, window=window, scn=scn)
    return name


def test_batch_read_equals_the_topic(topics: Any, rich: str) -> None:
    df = topics.reader(rich).load()
    assert topics.rows(df) == topics.expected(rich, partitions=2)
    # One input partition per topic partition with the default ranges=1.
    assert df.rdd.getNumPartitions() == 2


def test_headers_column_only_with_include_headers(topics: Any, rich: str) -> None:
    plain = topics.reader(rich).load()
    assert "headers" not in plain.columns
    with_headers = topics.reader(rich, includeHeaders="true").load()
    assert with_headers.columns[-1] == "headers"
    rows = with_headers.select("partition", "key_string", "headers").collect()
    by_key = {r.key_string: r.headers for r in rows if r.key_string}
    assert by_key["user-1"] == {"h": bytearray(b"x")}
    assert all(r.headers is None for r in rows if r.partition == 0)


def test_range_splits_are_disjoint_and_cover_the_topic(topics: Any, rich: str) -> None:
    full = topics.expected(rich, partitions=2)
    seen: list[tuple[Any, ...]] = []
    for r in equal_splits(3):
        part = topics.rows(topics.reader(rich, ranges=f"{r.slot_first}-{r.slot_last}").load())
        assert all(r.slot_first <= row[10] <= r.slot_last for row in part)
        seen.extend(part)
    assert sorted(seen) == full  # together all events, and no event twice
    split = topics.reader(rich, ranges="3").load()
    assert split.rdd.getNumPartitions() == 2 * 3
    assert topics.rows(split) == full


def test_explicit_ranges_read_only_their_slots(topics: Any, rich: str) -> None:
    df = topics.reader(rich, ranges="0-999,60000-65535").load()
    want = [row for row in topics.expected(rich, partitions=2)
            if row[10] <= 999 or row[10] >= 60000]
    assert topics.rows(df) == want


def test_starting_and_ending_offsets(topics: Any, rich: str) -> None:
    df = topics.reader(rich, startingOffsets='{"spark-read-rich":{"0":100,"1":-2}}',
                       endingOffsets='{"spark-read-rich":{"0":200}}').load()
    want = [row for row in topics.expected(rich, partitions=2)
            if (row[1] == 0 and 100 <= row[2] < 200) or row[1] == 1]
    assert topics.rows(df) == want


def test_broker_side_filter_option(topics: Any, rich: str) -> None:
    df = topics.reader(rich, filter="mod:2:[0]").load()
    keys = [row[3] for row in topics.rows(df) if row[3] is not None and row[4] is None]
    assert keys and all(abs(k) % 2 == 0 for k in keys)
    want = [r for r in topics.expected(rich, partitions=2) if r[3] is not None and r[4] is None
            and abs(r[3]) % 2 == 0]
    assert len(keys) == len(want)


def test_multiple_topics(topics: Any, rich: str) -> None:
    other = topics.make("spark-read-other")
    topics.produce_ints(other, 0, list(range(50)))
    df = topics.reader(f"{rich},{other}").load()
    assert df.count() == len(topics.expected(rich, partitions=2)) + 50
    assert {r.topic for r in df.select("topic").distinct().collect()} == {rich, other}
