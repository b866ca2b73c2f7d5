"""A write task outlives a restart of its broker; a wrong address fails at save().

Goal: a Spark write task that opens its producer while the broker restarts
waits for it (as Kafka's producer blocks up to max.block.ms), where before it
failed at once with "connection refused" and with it the job, or the
streaming query that wrote to keybus (3 of 3 broker restarts of 3 s under a
keybus-to-keybus stream ended it). A broker away for longer fails the task
after the wait, saying so; and the driver checks the broker when the write
is planned, so a wrong address still fails at save(), at once.
Method: TaskProducer (what a task runs) against a port whose broker starts
2 s later, and against a closed port with a short wait; a Spark write to a
closed port.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keybus.dev_cluster import free_port
from spark_connector import _client
from spark_connector.task_producer import EventColumns, TaskProducer
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.spark


@pytest.fixture
def late_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker that is not running now, whose data holds the topic "late": the
    test starts it. The topic is made beforehand, not after the start, or a task
    that reached the broker in between was told, rightly, that it does not exist."""
    from tests.support import wire

    process = BrokerProcess(tmp_path / "data", port=free_port())
    process.start()
    wire.create_topic(wire.stub(process.address), "late")
    process.stop()
    yield process
    process.stop()


def test_a_task_waits_for_a_broker_that_is_starting(late_broker: BrokerProcess) -> None:
    from tests.support import wire

    def start_late() -> None:
        time.sleep(2)
        late_broker.start()

    starter = threading.Thread(target=start_late)
    starter.start()
    producer = TaskProducer(late_broker.address, None, in_flight_max=2)
    try:
        assert producer.partitions("late") == 1  # opened once the broker was back
        producer.send("late", 0, EventColumns([1, 2, 3], [b"a", b"b", b"c"]))
        assert producer.finish().events == 3
    finally:
        producer.abort()
        starter.join()
    assert [k for _, k, _, _ in wire.events_of(wire.read_all(wire.stub(late_broker.address),
                                                             "late"))] == [1, 2, 3]


def test_a_task_fails_after_the_wait_saying_so() -> None:
    producer = TaskProducer(f"127.0.0.1:{free_port()}", None, in_flight_max=2)
    producer.open_unreachable_wait_s = 1.0
    began = time.monotonic()
    try:
        with pytest.raises(_client.BrokerCallError) as caught:
            producer.partitions("t")
    finally:
        producer.abort()
    assert 1.0 <= time.monotonic() - began < 30
    assert "connection refused" in str(caught.value)
    assert "the most a write task waits" in str(caught.value)


def test_a_write_to_a_closed_port_fails_on_the_driver(spark: Any) -> None:
    df = spark.createDataFrame([(1, "v")], "key_long long, value string")
    began = time.monotonic()
    with pytest.raises(Exception) as caught:
        df.write.format("keybus").option("broker", f"127.0.0.1:{free_port()}") \
            .option("topic", "t").mode("append").save()
    assert "Failed to initialize Python data source writer" in str(caught.value)
    assert "DescribeTopic('t')" in str(caught.value) and "connection refused" in str(caught.value)
    assert time.monotonic() - began < 50  # not the tasks' wait for their broker
