"""startingOffsets can name an SCN per topic partition: {"orders":{"0":{"scn":N}}}.

Goal: a Databus-style user, whose checkpoint is an SCN, starts a batch read or
a stream at the first event whose SCN is at least N (the broker's
StartPosition.scn, which the SDK's readers take as {'scn': N}), and gets
exactly the events with SCN >= N below the end. Before, the option refused
the form. Method: windows with chosen SCNs and plain batches between them on
a real broker; Spark's rows are compared with the log read over the wire.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spark_connector.options import OptionError, Use, parse_read_options

pytestmark = pytest.mark.spark

SCN_COLUMN = 9  # in conftest.ROW_COLUMNS


def _scn_topic(topics: Any, name: str) -> str:
    from tests.support import wire

    topics.make(name, partitions=2)
    for p in range(2):
        for i, scn in enumerate((100, 200, 300)):
            topics.produce(name, p, wire.int_batch([p * 1000 + i * 10 + k for k in range(5)]),
                           window=True, scn=scn + p)
            topics.produce_ints(name, p, [p * 1000 + i * 10 + 5 + k for k in range(3)])
    return name


def test_batch_read_starts_at_the_first_event_of_an_scn(topics: Any) -> None:
    name = _scn_topic(topics, "spark-scn-batch")
    every = topics.expected(name, partitions=2)
    starting = {name: {"0": {"scn": 200}, "1": {"scn": 250}}}
    df = topics.reader(name, startingOffsets=json.dumps(starting), ranges="2").load()
    want = [r for r in every if r[SCN_COLUMN] >= (200 if r[1] == 0 else 250)]
    got = topics.rows(df)
    assert got == want
    assert {r[1] for r in got} == {0, 1} and len(got) < len(every)
    past = {name: {"0": {"scn": 10**12}}}
    assert topics.reader(name, startingOffsets=json.dumps(past)).load() \
        .where("partition = 0").count() == 0


def test_stream_starts_at_the_scn(topics: Any, tmp_path: Path) -> None:
    name = _scn_topic(topics, "spark-scn-stream")
    stream = (topics.spark.readStream.format("keybus").option("broker", topics.address)
              .option("topic", name)
              .option("startingOffsets", json.dumps({name: {"1": {"scn": 301}}})).load())
    query = (stream.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(300)
    got = sorted((r.partition, r.offset) for r in topics.spark.read.parquet(str(tmp_path / "out"))
                 .collect())
    want = sorted((r[1], r[2]) for r in topics.expected(name, partitions=2)
                  if r[1] == 0 or r[SCN_COLUMN] >= 301)
    assert got == want


@pytest.mark.parametrize("option, value, words", [
    ("startingOffsets", '{"t":{"0":{"scn":-1}}}', ['{"scn": N}', "0..2**64-1"]),
    ("startingOffsets", '{"t":{"0":{"offset":3}}}', ['{"scn": N}']),
    ("endingOffsets", '{"t":{"0":{"scn":3}}}', ["'endingOffsets'", "offset >= 0"]),
])
def test_a_bad_scn_entry_is_named(option: str, value: str, words: list[str]) -> None:
    with pytest.raises(OptionError) as caught:
        parse_read_options({"broker": "h:1", "topic": "t", option: value}, Use.BATCH_READ)
    for word in words:
        assert word in str(caught.value)
