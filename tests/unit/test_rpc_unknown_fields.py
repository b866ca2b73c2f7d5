"""Goal: a request carrying a field this broker does not know is refused with the field's
number and the fields allowed, at its top level or in any single message field set in it
(a oneof member included); a request without one passes.

Method: requests serialized, an unknown varint field appended to the top level or to a
nested message's bytes, parsed again as the broker's decoder does, then checked.
"""

from __future__ import annotations

import pytest
from google.protobuf.message import Message

from broker.errors import BrokerError
from broker.rpc.status import refuse_unknown_fields
from sdk.core.pb import keybus_pb2 as pb
from tests.support.wire import int_batch

UNKNOWN = b"\xa0\x06\x01"  # field 100, varint 1


def nested(owner: type[Message], name: str, body: bytes) -> bytes:
    """The wire bytes of message field `name` of `owner` holding `body` (under 128 bytes)."""
    number = owner.DESCRIPTOR.fields_by_name[name].number
    return bytes([number << 3 | 2, len(body)]) + body


def produce_request(in_batch: bytes = b"") -> pb.ProduceRequest:
    """A produce request of one event, `in_batch` appended to its batch's bytes."""
    batch = int_batch([7]).SerializeToString() + in_batch
    top = pb.ProduceRequest(topic="t", request_id=1).SerializeToString()
    return pb.ProduceRequest.FromString(top + nested(pb.ProduceRequest, "batch", batch))


def test_a_request_of_known_fields_passes() -> None:
    refuse_unknown_fields(produce_request())
    refuse_unknown_fields(pb.SubscribeRequest(ack=pb.Ack(partition=0)))


def test_an_unknown_field_at_the_top_is_named_with_the_fields_allowed() -> None:
    request = pb.ProduceRequest.FromString(produce_request().SerializeToString() + UNKNOWN)
    with pytest.raises(BrokerError) as caught:
        refuse_unknown_fields(request)
    assert "100" in caught.value.message and "ProduceRequest" in caught.value.message
    assert "batch" in caught.value.message  # the fields allowed


def test_an_unknown_field_in_a_nested_message_is_refused() -> None:
    with pytest.raises(BrokerError) as caught:
        refuse_unknown_fields(produce_request(UNKNOWN))
    assert "EventBatch" in caught.value.message and "100" in caught.value.message


def test_an_unknown_field_in_a_oneof_member_is_refused() -> None:
    ack = pb.Ack(partition=0).SerializeToString() + UNKNOWN
    request = pb.SubscribeRequest.FromString(nested(pb.SubscribeRequest, "ack", ack))
    assert request.WhichOneof("body") == "ack"
    with pytest.raises(BrokerError) as caught:
        refuse_unknown_fields(request)
    assert "Ack" in caught.value.message
