"""Consumers that stop reading one after another stay within the outbox budget.

Goal: `consumer_outbox_broker_bytes_max` bounds what the broker holds queued for
consumers that do not read, whatever order they stall in. Each stream pauses past
an equal share of the budget; a stream that filled while its share was larger
keeps what it took (nothing queued is dropped). Before, that was all: streams that
stall one by one, each filling before the next opens, held the sum of the shares
they filled under (budget x (1 + 1/2 + ... + 1/n); 3.7 times the budget at the
defaults). Now a stream also pauses once all outboxes together hold the budget,
so the n-th stalled stream takes one round's sends at most.

Method: a real broker process with a 24 MiB budget, each stream allowed the whole
of it alone (`consumer_outbox_bytes_max`), a topic of 48 MB in records of two
200 kB events. STALLED raw Subscribe streams, each on a subscription of its own
with a channel at HTTP/2's first window (64 KiB: what the client lets in is not
the broker's memory), open one at a time: each grants permits for every event,
reads nothing after its first message, and is left until it is sent nothing more.
Then the broker's RSS and what the streams were sent are compared with the budget.

Measured on the code before (2 cores, AMD EPYC): the streams were sent 24.0, 12.6,
8.0, 6.9, 5.7, 4.6 MiB (61.8 MiB, 2.6 times the budget) and the broker's RSS grew
141-142 MiB; after, 22.9 MiB for the first and about one read for each other
(28.2 MiB in all) and a growth of 105-107 MiB, of which 81 MiB is the cost of
reading the log (READ_SLACK_BYTES).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from benchmarks.memory import resident_mb
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.metrics import gauge
from tests.support.wire import fill_topic, stalled_subscribe, stub

BUDGET = 24 << 20
TOPIC = "big"
EVENTS = 240
VALUE = 200_000
RECORD_EVENTS = 2  # a stored record: 400 kB, the most one message of a send carries here
READ_BYTES = 1 << 20  # a dispatcher's read, so a round's sends to one stream are about this
STALLED = 6
STEADY_S = 2.0
UNREAD_CHANNEL = [("grpc.http2.bdp_probe", 0)]  # the client's window stays 64 KiB
# Past the budget each stalled stream may take one round's sends (a read, and the
# record it ends in) and the client's window; what counts is whether the n-th stream
# still gets a share of its own.
ROUND_BYTES = READ_BYTES + RECORD_EVENTS * VALUE + (64 << 10)
# Reading the log costs memory with no outbox at all: with a budget of 256 KiB the same
# six streams grew the broker by 81 MiB (55 with glibc's mmap threshold fixed at 128
# KiB), one stream by 6 MiB: what the dispatchers' reads (on worker threads) leave in
# malloc's arenas, not anything the outboxes hold.
READ_SLACK_BYTES = 96 << 20
METRICS_PORT = free_port()


@pytest.fixture()
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", "--no-fsync", "--metrics-port", str(METRICS_PORT),
                            "--consumer-outbox-broker-bytes-max", str(BUDGET),
                            "--consumer-outbox-bytes-max", str(BUDGET),
                            "--event-bytes-max", str(256 << 10),
                            "--dispatch-read-bytes-max", str(READ_BYTES),
                            "--dispatch-cache-broker-bytes-max", str(4 << 20))
    process.start()
    try:
        yield process
    finally:
        process.stop()


def sent_when_steady(client: pb_grpc.KeybusStub, subscription: str) -> int:
    """The events a stalled stream was sent, once that stays the same for STEADY_S."""
    sent, steady_since = -1, time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = client.DescribeSubscription(pb.DescribeSubscriptionRequest(
            topic=TOPIC, subscription=subscription), timeout=10).partitions[0].consumers[0].unacked
        if now != sent:
            sent, steady_since = now, time.monotonic()
        elif time.monotonic() - steady_since >= STEADY_S:
            return sent
        time.sleep(0.2)
    raise AssertionError(f"{subscription} was still being sent events after 60 s: {sent}")


def test_streams_that_stall_one_by_one_hold_the_budget(broker: BrokerProcess) -> None:
    client = stub(broker.address)
    fill_topic(client, TOPIC, EVENTS, RECORD_EVENTS, VALUE)
    pid = broker.process.pid  # type: ignore[union-attr]
    time.sleep(0.5)
    before, peak = resident_mb(pid), 0.0
    done = threading.Event()
    channels: list[grpc.Channel] = []
    calls = []  # held: a call that is collected is cancelled
    sent: list[int] = []
    try:
        for i in range(STALLED):
            channels.append(grpc.insecure_channel(broker.address, options=UNREAD_CHANNEL))
            call = pb_grpc.KeybusStub(channels[-1]).Subscribe(stalled_subscribe(
                TOPIC, f"stalled{i}", "c", done, permits=EVENTS), timeout=120)
            next(call)  # opened; never read again
            calls.append(call)
            sent.append(sent_when_steady(client, f"stalled{i}"))
            peak = max(peak, resident_mb(pid))
        time.sleep(1.2)  # the gauge is updated each second
        held = gauge(METRICS_PORT, "keybus_consumer_outbox_bytes")
    finally:
        done.set()
        for channel in channels:
            channel.close()
    growth = (peak - before) * 2**20
    sent_bytes = [n * VALUE for n in sent]
    print(f"broker RSS {before:.0f} MB, {peak:.0f} MB with {STALLED} streams stalled one by "
          f"one: growth {growth / 2**20:.0f} MiB for a {BUDGET >> 20} MiB budget; sent "
          f"{[round(b / 2**20, 1) for b in sent_bytes]} MiB; keybus_consumer_outbox_bytes "
          f"{held / 2**20:.1f} MiB")
    assert sum(sent_bytes) <= BUDGET + (STALLED - 1) * ROUND_BYTES, \
        f"the stalled streams were sent {sum(sent_bytes) / 2**20:.1f} MiB: {sent}"
    # what the budget counts also has gRPC's copy of the message each stream is writing
    assert held <= BUDGET + STALLED * 2 * ROUND_BYTES, held
    assert growth <= BUDGET + STALLED * ROUND_BYTES + READ_SLACK_BYTES, \
        f"the broker's RSS grew {growth / 2**20:.0f} MiB"
