"""A running stream outlives a restart of its broker.

Goal: a broker restart (seconds without an answer) does not end a streaming
query, as a Kafka broker restart does not end Spark's Kafka source: the
driver asks for the partitions' end offsets at every trigger, and before, the
first DescribeTopic that met the closed port failed the query ("cannot reach
broker ... connection refused"), though its tasks' readers reconnect. The
sink then gets every event once. A broker that stays away still fails the
query, after STREAM_UNREACHABLE_WAIT_S, with the same clear message.
Method: a broker process of its own, SIGKILLed under an idle query (triggers
every 200 ms) and started again on the same port 3 s later.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.spark


def _produce(broker: BrokerProcess, keys: list[int]) -> None:
    from sdk.core.pb import keybus_pb2 as pb
    from tests.support import wire

    request = pb.ProduceRequest(topic="restarted", partition=0, batch=wire.int_batch(keys))
    (response,) = wire.produce(wire.stub(broker.address), [request])
    assert response.error_code == 0, response.error_message


def test_query_goes_on_after_its_broker_restarts(spark: Any, broker: BrokerProcess,
                                                 tmp_path: Path) -> None:
    from tests.support import wire

    wire.create_topic(wire.stub(broker.address), "restarted")
    _produce(broker, list(range(100)))
    query = (spark.readStream.format("keybus").option("broker", broker.address)
             .option("topic", "restarted").option("startingOffsets", "earliest").load()
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        broker.kill()
        time.sleep(3)  # about 15 triggers ask a closed port
        broker.start()
        _produce(broker, list(range(100, 150)))
        query.processAllAvailable()
        assert query.isActive, query.exception()
    finally:
        query.stop()
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.offset for r in rows) == list(range(150))  # every event, none twice


def test_a_broker_that_stays_away_fails_the_stream_after_the_wait() -> None:
    from keybus.dev_cluster import free_port
    from spark_connector import _client

    closed = f"127.0.0.1:{free_port()}"
    began = time.monotonic()
    with pytest.raises(_client.BrokerCallError) as caught:
        _client.describe(closed, ["t"], missing_ok=True, unreachable_wait_s=1.5)
    assert 1.5 <= time.monotonic() - began < 30
    assert caught.value.unreachable
    assert "connection refused" in str(caught.value)
    assert re.search(r"unreachable for \d+ s, the most a running stream waits", str(caught.value))
    with pytest.raises(_client.BrokerCallError) as at_once:  # a read being defined
        _client.describe(closed, ["t"])
    assert "the most a running stream waits" not in str(at_once.value)
