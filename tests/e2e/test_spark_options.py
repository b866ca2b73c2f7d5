"""Bad options fail at once with a message that names the option and what is allowed.

Goal: every malformed or unknown option is refused when the DataFrame is
defined (load(), save(), start()), before any task runs, and the message
is one a user can act on. Method: the pure option and partitioning parsers
are checked directly for each rule, then a few cases go through Spark to
show the message reaches the user.
"""

from __future__ import annotations

from typing import Any

import pytest

from sdk.core.model import HashRange, TopicPartition
from spark_connector.options import OptionError, Use, parse_read_options, parse_write_options
from spark_connector.partitioning import (
    DataLossError,
    PartitionBounds,
    PartitioningError,
    check_data_loss,
    limit_offsets,
    offsets_from_json,
    offsets_to_json,
    parse_ranges_option,
    range_groups,
    resolve_ranges,
)
from spark_connector.pushdown import GUARD, Condition, plan_pushdown

pytestmark = pytest.mark.spark

BASE = {"broker": "localhost:6650", "topic": "orders"}


@pytest.mark.parametrize("options, use, words", [
    ({"bogus": "1"}, Use.BATCH_READ, ["'bogus'", "allowed", "startingOffsets"]),
    ({"broker": "localhost:99999"}, Use.BATCH_READ, ["'broker'", "1..65535"]),
    ({"broker": ""}, Use.BATCH_READ, ["'broker' is required"]),
    ({"topic": " ,x"}, Use.BATCH_READ, ["'topic'", "empty name"]),
    ({"ranges": "0"}, Use.BATCH_READ, ["'ranges'", "1..65536"]),
    ({"ranges": "10-5"}, Use.BATCH_READ, ["'ranges'", "first <= last"]),
    ({"ranges": "0-100,50-200"}, Use.BATCH_READ, ["'ranges'", "overlap"]),
    ({"ranges": "abc"}, Use.BATCH_READ, ["'ranges'", "subscription:NAME"]),
    ({"startingOffsets": "latest"}, Use.BATCH_READ, ["'startingOffsets'", "not allowed"]),
    ({"endingOffsets": "earliest"}, Use.BATCH_READ, ["'endingOffsets'", "not allowed"]),
    ({"startingOffsets": "{bad"}, Use.BATCH_READ, ["'startingOffsets'", "-2 = earliest"]),
    ({"startingOffsets": '{"other":{"0":1}}'}, Use.BATCH_READ, ["topic 'other'"]),
    ({"startingOffsets": '{"orders":{"0":-7}}'}, Use.BATCH_READ, ["orders/0", "offset >= 0"]),
    ({"endingOffsets": "latest"}, Use.STREAM_READ, ["'endingOffsets'", "streaming read"]),
    ({"maxEventsPerTrigger": "100"}, Use.BATCH_READ, ["'maxEventsPerTrigger'", "batch read"]),
    ({"maxEventsPerTrigger": "0"}, Use.STREAM_READ, ["'maxEventsPerTrigger'", "1 or more"]),
    ({"filter": "range:0:[1]"}, Use.BATCH_READ, ["'filter'", "range.size"]),
    ({"filter": "mod:4:[5]"}, Use.BATCH_READ, ["'filter'", "below 4"]),
    ({"failOnDataLoss": "maybe"}, Use.BATCH_READ, ["'failOnDataLoss'", "true or false"]),
    ({"includeHeaders": "1"}, Use.BATCH_READ, ["'includeHeaders'", "true or false"]),
    ({"pushdown": "always"}, Use.BATCH_READ, ["'pushdown'", "off, guarded"]),
])
def test_bad_read_options_name_the_option(options: dict[str, str], use: Use,
                                          words: list[str]) -> None:
    with pytest.raises(OptionError) as caught:
        parse_read_options({**BASE, **options}, use)
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize("options, words", [
    ({"topic": "a,b"}, ["'topic'", "one topic"]),
    ({"writeBatchEvents": "0"}, ["'writeBatchEvents'", "1..100000"]),
    ({"writeIdempotence": "none"}, ["'writeIdempotence'", "task, attempt"]),
    ({"startingOffsets": "earliest"}, ["'startingOffsets'", "write"]),
])
def test_bad_write_options_name_the_option(options: dict[str, str], words: list[str]) -> None:
    with pytest.raises(OptionError) as caught:
        parse_write_options({**BASE, **options})
    for word in words:
        assert word in str(caught.value)


def test_options_are_case_insensitive_and_defaults_hold() -> None:
    options = parse_read_options({"BROKER": "h:1", "Topic": "b,a", "STARTINGOFFSETS": "latest",
                                  "maxeventspertrigger": "5"}, Use.STREAM_READ)
    assert options.topics == ("a", "b")
    assert options.max_events_per_trigger == 5
    batch = parse_read_options(BASE, Use.BATCH_READ)
    assert batch.ranges.ranges == (HashRange(0, 65535),)
    assert batch.fail_on_data_loss and not batch.include_headers


def test_subscription_ranges_become_one_group_per_consumer() -> None:
    spec = parse_ranges_option("subscription:billing")
    assert spec.subscription == "billing" and resolve_ranges(spec) == []
    p0, p1 = TopicPartition("t", 0), TopicPartition("t", 1)
    live = {p0: [[HashRange(0, 99), HashRange(500, 599)], [HashRange(100, 499)]], p1: [[]]}
    assert range_groups(spec, [p0], live) == {p0: live[p0]}
    with pytest.raises(PartitioningError, match="no Key_Shared consumer with hash ranges on t/1"):
        range_groups(spec, [p0, p1], live)
    explicit = parse_ranges_option("2")
    assert range_groups(explicit, [p0]) == {p0: [[HashRange(0, 32767)], [HashRange(32768, 65535)]]}


def test_admission_splits_the_budget_by_backlog() -> None:
    a, b, c = (TopicPartition("t", p) for p in range(3))
    start = {a: 0, b: 100, c: 50}
    latest = {a: 1000, b: 200, c: 50}
    ends = limit_offsets(start, latest, 110)
    assert sum(ends[tp] - start[tp] for tp in ends) == 110
    assert ends == {a: 100, b: 110, c: 50}
    assert limit_offsets(start, latest, None) == latest
    assert limit_offsets(start, latest, 10_000) == latest
    one = limit_offsets({a: 0, b: 0}, {a: 1, b: 1}, 1)
    assert sum(one.values()) == 1  # progress even when every share rounds to 0


def test_offsets_json_round_trip_in_a_fixed_order() -> None:
    offsets = {TopicPartition("b", 10): 1, TopicPartition("b", 2): 5, TopicPartition("a", 0): 7}
    as_json = offsets_to_json(offsets)
    assert list(as_json) == ["a", "b"] and list(as_json["b"]) == ["2", "10"]
    assert offsets_from_json(as_json) == offsets


def test_data_loss_fails_or_skips() -> None:
    tp = TopicPartition("t", 0)
    bounds = {tp: PartitionBounds(start_offset=50, end_offset=80)}
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        check_data_loss({tp: 10}, bounds, True)
    assert check_data_loss({tp: 10}, bounds, False) == {tp: 50}


def test_pushdown_needs_the_guard() -> None:
    key = Condition("key_long", "=", (5,))
    assert not plan_pushdown([key]).narrows
    plan = plan_pushdown([GUARD, key, Condition("offset", "<", (9,))])
    assert plan.key_filter is not None and plan.offset_stop == 9
    negative = plan_pushdown([GUARD, Condition("key_long", "in", (-5, 7))]).key_filter
    assert negative is not None and negative.num_buckets == 1 << 32
    assert plan_pushdown([GUARD, key, Condition("key_long", "=", (6,))]).empty


def test_spark_reports_bad_options_when_the_dataframe_is_defined(spark: Any, topics: Any) -> None:
    def reader() -> Any:
        return spark.read.format("keybus").option("broker", topics.address).option("topic", "x")

    with pytest.raises(Exception, match="'ranges'"):
        reader().option("ranges", "zero").load()
    with pytest.raises(Exception, match="not known for a keybus read"):
        reader().option("startingOffset", "earliest").load()
    with pytest.raises(Exception, match="'ranges'"):
        reader().option("ranges", "subscription:").load()
    with pytest.raises(Exception, match="DescribeTopic"):
        reader().load().count()
    df = spark.createDataFrame([(1,)], "key_long long")
    with pytest.raises(Exception, match="needs a 'value' column"):
        df.write.format("keybus").option("broker", topics.address).option("topic", "x") \
            .mode("append").save()
    with pytest.raises(Exception, match="append-only"):
        spark.createDataFrame([(1, b"v")], "key_long long, value binary").write \
            .format("keybus").option("broker", topics.address).option("topic", "x") \
            .mode("overwrite").save()
