"""A client that goes away mid-delivery ends its stream quietly in the broker.

Goal: a Subscribe, Read or Bootstrap stream whose client cancels while the
broker is writing responses to it (a killed consumer) leaves no ERROR and no
traceback in the broker's log; before, gRPC logged "ExecuteBatchError raised
in core by servicer method" with a traceback for most such streams.
Method: one broker process; a topic of 10 MB (100 events of 100 kB, more
than HTTP/2 flow control lets through to a client that does not read), so
the broker is blocked in a write when the client cancels. Three streams of
each kind, each on its own channel and never read past its first message,
are cancelled; once the broker has ended them all (the subscription has no
consumer left, the bootstrap slots are free again), it is stopped and its log
read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from tests.support.broker_process import BrokerProcess
from tests.support.wire import create_topic, int_batch, produce, stalled_subscribe, stub

TOPIC = "big"
STREAMS = 3  # of each kind; also the broker's bootstrap_streams_max
VALUE = b"x" * 100_000


@pytest.fixture()
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", "--bootstrap-streams-max", str(STREAMS))
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _open_streams(address: str, done: threading.Event) -> list[tuple[grpc.Channel, Any]]:
    """Streams of each kind, each started (its first response arrived) and left unread."""
    opened = []
    for i in range(STREAMS):
        for kind in ("read", "subscribe", "bootstrap"):
            channel = grpc.insecure_channel(address)
            client = pb_grpc.KeybusStub(channel)
            if kind == "read":
                call = client.Read(pb.ReadRequest(topic=TOPIC, follow=True,
                                                  start=pb.StartPosition(earliest=True)),
                                   timeout=60)
            elif kind == "subscribe":
                call = client.Subscribe(stalled_subscribe(TOPIC, "s", f"c{i}", done),
                                        timeout=60)
            else:
                call = client.Bootstrap(pb.BootstrapRequest(topic=TOPIC, follow=True), timeout=60)
            next(call)
            opened.append((channel, call))
    return opened


def _wait_until_ended(client: pb_grpc.KeybusStub) -> None:
    """Until the broker has ended the cancelled streams (bounded)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = client.DescribeSubscription(pb.DescribeSubscriptionRequest(
            topic=TOPIC, subscription="s"), timeout=10)
        if not info.partitions[0].consumers and _bootstrap_slots_free(client):
            return
        time.sleep(0.05)
    raise AssertionError("the broker did not end the cancelled streams within 30 s")


def _bootstrap_slots_free(client: pb_grpc.KeybusStub) -> bool:
    """Whether every bootstrap slot is free: as many snapshots start as the limit."""
    calls = []
    try:
        for _ in range(STREAMS):
            calls.append(client.Bootstrap(pb.BootstrapRequest(topic=TOPIC), timeout=10))
            next(calls[-1])
        return True
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise
        return False
    finally:
        for call in calls:
            call.cancel()


def test_cancelled_streams_leave_no_error_in_the_broker_log(broker: BrokerProcess) -> None:
    client = stub(broker.address)
    create_topic(client, TOPIC)
    for first in range(0, 100, 10):
        keys = list(range(first, first + 10))
        batch = pb.EventBatch(count=10, key_ints=keys, slots=int_batch(keys).slots,
                              values=[VALUE] * 10)
        assert produce(client, [pb.ProduceRequest(topic=TOPIC, batch=batch)])[0].error_code == 0
    done = threading.Event()
    try:
        opened = _open_streams(broker.address, done)
        for channel, call in opened:
            call.cancel()
            channel.close()
        _wait_until_ended(client)
    finally:
        done.set()
    broker.stop()
    log = broker.log_path.read_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
