"""The SDK's keepalive pings and the broker's ping policy agree (sdk/channel.py,
broker/keepalive.py), and the broker pings its clients as its settings say.

Goal: every SDK channel (consumer, reader, producer, processor, Databus, the
relay's upstream channel) pings a silent broker and gives up on an unanswered
ping within seconds, and the broker accepts those pings on idle streams and
between calls, so they never earn a GOAWAY too_many_pings. The broker pings
a silent client after client_keepalive_time_ms and gives up after
client_keepalive_timeout_ms (also as ping_timeout_ms); 0 leaves gRPC's default.
Method: read the option lists as gRPC gets them; the behaviour itself is
tests/integration/test_frozen_broker.py and test_frozen_consumer.py.
"""

from __future__ import annotations

import pytest

from broker.config import ConfigError, Settings, load_settings
from broker.keepalive import KEEPALIVE_SERVER_OPTIONS, server_options
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


def test_the_broker_pings_its_clients_as_set() -> None:
    options = dict(server_options(Settings()))
    assert options["grpc.keepalive_time_ms"] == 30_000  # Pulsar's keepAliveIntervalSeconds
    assert options["grpc.keepalive_timeout_ms"] == options["grpc.http2.ping_timeout_ms"] == 10_000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    quick = dict(server_options(load_settings(env={}, overrides={
        "client_keepalive_time_ms": "1000", "client_keepalive_timeout_ms": "500"})))
    assert (quick["grpc.keepalive_time_ms"], quick["grpc.http2.ping_timeout_ms"]) == (1000, 500)


def test_time_0_leaves_grpcs_default_and_the_accepting_policy() -> None:
    options = server_options(Settings(client_keepalive_time_ms=0))
    assert options == KEEPALIVE_SERVER_OPTIONS


@pytest.mark.parametrize(("name", "value", "says"), [
    ("client_keepalive_timeout_ms", 0, "client_keepalive_timeout_ms=0 must be > 0"),
    ("client_keepalive_time_ms", -1, "client_keepalive_time_ms=-1 is negative"),
])
def test_bad_keepalive_settings_are_refused(name: str, value: int, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        Settings(**{name: value})
