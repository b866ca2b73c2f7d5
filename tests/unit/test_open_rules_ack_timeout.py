"""The broker's side of a client-timed ack timeout (SubscribeOpen.ack_timeout_by_client):
the value is checked as always, but the consumer's events are not timed by the broker."""

from __future__ import annotations

import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.partition import TopicMeta
from broker.subscription.consumer_state import Session
from broker.subscription.open_rules import consumer_spec
from sdk.core.pb import keybus_pb2 as pb

META = TopicMeta("t", 1, 2, 0, 0, 0)


def open_request(ack_timeout_ms: int, by_client: bool) -> pb.SubscribeOpen:
    return pb.SubscribeOpen(topic="t", subscription="s", consumer_name="c", type=pb.SHARED,
                            ack_timeout_ms=ack_timeout_ms, ack_timeout_by_client=by_client)


def member_timeout(request: pb.SubscribeOpen) -> int:
    spec = consumer_spec(request, META, Settings())
    return Session(spec, "t", "s", 10).member_spec().ack_timeout_ms


def test_a_client_timed_ack_timeout_is_not_timed_by_the_broker() -> None:
    assert member_timeout(open_request(1_000, by_client=True)) == 0


def test_a_raw_client_keeps_the_broker_timing_its_events() -> None:
    assert member_timeout(open_request(1_000, by_client=False)) == 1_000


@pytest.mark.parametrize("value", [5, 200, 3_600_001])
def test_an_out_of_range_timeout_is_refused_the_same_with_the_flag(value: int) -> None:
    messages = []
    for by_client in (False, True):
        with pytest.raises(BrokerError) as raised:
            consumer_spec(open_request(value, by_client), META, Settings())
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
    assert "ack_timeout_ms" in messages[0] and "1000..3600000" in messages[0]
