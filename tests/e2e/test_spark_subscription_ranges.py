"""`ranges=subscription:NAME`: Spark reads split by a live Key_Shared subscription.

Goal: the input partitions are exactly the consumers' hash ranges that
`keybus subscriptions describe` shows, and together they read the whole topic.
Method: two sticky Key_Shared consumers on a real broker declare ranges; the
batch reader plans its partitions; `keybus subscriptions describe --json`
is run as a user would; Spark counts the rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from sdk.consumer import Consumer
from sdk.core.model import HashRange
from spark_connector.options import Use, parse_read_options
from spark_connector.source import KeybusBatchReader
from tests.support.broker_process import REPO

pytestmark = pytest.mark.spark


async def _hold_consumers(address: str, topic: str, ready: asyncio.Event, done: asyncio.Event) -> None:
    consumers = [
        await Consumer.subscribe(address, topic, "spark-split", type="key_shared", mode="sticky",
                                 ranges=ranges, consumer_name=name, receiver_queue_size=2)
        for name, ranges in (("left", "0-20000,50000-65535"), ("right", "20001-49999"))]
    ready.set()
    await done.wait()
    for consumer in consumers:
        await consumer.close()


def _describe_ranges(address: str, topic: str) -> dict[str, list[str]]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-m", "keybus", "subscriptions", "describe", topic,
                          "spark-split", "--json", "--broker", address], capture_output=True,
                         text=True, timeout=60, env=env, cwd=REPO, check=True).stdout
    info = json.loads(out)
    return {c["name"]: c["ranges"].split(",") for c in info["partitions"][0]["consumers"]}


def test_subscription_ranges_match_describe(topics: Any, spark: Any) -> None:
    topic = topics.make("spark-subscription-ranges")
    topics.produce_ints(topic, 0, list(range(2_000)))

    async def scenario() -> tuple[list[Any], dict[str, list[str]]]:
        ready, done = asyncio.Event(), asyncio.Event()
        holder = asyncio.create_task(_hold_consumers(topics.address, topic, ready, done))
        await ready.wait()
        try:
            options = parse_read_options({"broker": topics.address, "topic": topic,
                                          "ranges": "subscription:spark-split"}, Use.BATCH_READ)
            reader = KeybusBatchReader(options, spark.read.format("keybus").option(
                "broker", topics.address).option("topic", topic).load().schema)
            parts = await asyncio.to_thread(reader.partitions)
            described = await asyncio.to_thread(_describe_ranges, topics.address, topic)
            count = await asyncio.to_thread(
                lambda: topics.reader(topic, ranges="subscription:spark-split").load().count())
            assert count == 2_000
            return parts, described
        finally:
            done.set()
            await holder

    parts, described = asyncio.run(scenario())
    planned = sorted(tuple(str(r) for r in p.split.ranges) for p in parts)
    assert planned == sorted(tuple(ranges) for ranges in described.values())
    assert sorted(planned) == [("0-20000", "50000-65535"), ("20001-49999",)]
    assert all(isinstance(r, HashRange) for p in parts for r in p.split.ranges)
