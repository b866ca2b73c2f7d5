"""A request whose topic field is empty is told so, not that topic '' does not exist.

Goal: a client that forgot the topic (a field left empty, as protobuf sends
it) gets INVALID_ARGUMENT naming the empty field and what to give, from
every call that looks a topic up; "does not exist; create it first" pointed
at a topic no one can create.
Method: one real broker; raw gRPC calls with topic="".
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from tests.support.broker_process import BrokerProcess
from tests.support.wire import stub

CALLS: dict[str, Callable[[pb_grpc.KeybusStub], object]] = {
    "ListSubscriptions": lambda s: s.ListSubscriptions(pb.ListSubscriptionsRequest(topic=""),
                                                       timeout=10),
    "DescribeTopic": lambda s: s.DescribeTopic(pb.DescribeTopicRequest(topic=""), timeout=10),
    "DescribeSubscription": lambda s: s.DescribeSubscription(
        pb.DescribeSubscriptionRequest(topic="", subscription="s"), timeout=10),
    "Read": lambda s: list(s.Read(pb.ReadRequest(topic="", partition=0,
                                                 start=pb.StartPosition(earliest=True)),
                                  timeout=10)),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_an_empty_topic_is_an_invalid_argument(shared_broker: BrokerProcess, call: str) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        CALLS[call](stub(shared_broker.address))
    error = raised.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert "names no topic (its topic field is empty); give a topic name" in error.details()
