"""The SDK's keepalive pings and the broker's ping policy agree (sdk/channel.py,
broker/server.py).

Goal: every SDK channel (consumer, reader, producer, processor, Databus, the
relay's upstream channel) pings a silent broker and gives up on an unanswered
ping within seconds, and the broker accepts those pings on idle streams and
between calls, so they never earn a GOAWAY too_many_pings.
Method: read the option lists as gRPC gets them; the behaviour itself is
tests/integration/test_frozen_broker.py.
"""

from __future__ import annotations

from broker.server import KEEPALIVE_SERVER_OPTIONS
from sdk.channel import CHANNEL_OPTIONS
from sdk.core.keepalive import KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS


def test_sdk_channels_ping_a_silent_broker_and_give_up_within_seconds() -> None:
    options = dict(CHANNEL_OPTIONS)
    assert options["grpc.keepalive_time_ms"] == KEEPALIVE_TIME_MS <= 10_000
    # gRPC >= 1.60 waits ping_timeout_ms (60 s by default) for any ping's ack.
    assert options["grpc.keepalive_timeout_ms"] == options["grpc.http2.ping_timeout_ms"] \
        == KEEPALIVE_TIMEOUT_MS <= 5_000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.http2.max_pings_without_data"] == 0  # no cap on an idle stream


def test_the_broker_accepts_those_pings() -> None:
    server = dict(KEEPALIVE_SERVER_OPTIONS)
    assert server["grpc.keepalive_permit_without_calls"] == 1  # else 2 h between calls
    assert server["grpc.http2.min_ping_interval_without_data_ms"] < KEEPALIVE_TIME_MS
    assert server["grpc.http2.max_ping_strikes"] > 0  # a client pinging in a loop is cut off
