"""The pieces that let a read name the topic's incarnation it is of.

Goal: `wire.incarnation_field` put before a hand-built ReadResponse parses as
the generated class with the incarnation and every other field as built
(fields of a message may come in any order), and adds nothing for "";
`start_words` says a start as the refusal quotes it; the broker's refusal
(`read_other_incarnation`, FAILED_PRECONDITION) names both incarnations and
becomes the SDK's TopicRecreated by its name, whatever its words hold (a start
"SCN 7" would otherwise read as ScnNotIncreasing).
Method: hypothesis over records, offsets and incarnations; a grpc.RpcError
stand-in carrying the broker's status and trailing metadata.
"""

from __future__ import annotations

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import BrokerError
from broker.read_path import INCARNATION_FIELD_BYTES_MAX, RESPONSE_FIELDS_BYTES_MAX
from broker.rpc import wire
from broker.rpc.read_servicer import start_words
from broker.topics import new_incarnation
from sdk import errors
from sdk.core.pb import keybus_pb2 as pb
from tests.support.scripted_call import rpc_error


@given(st.lists(st.binary(max_size=200), max_size=4), st.integers(0, 2**64 - 1),
       st.integers(0, 2**64 - 1), st.text(max_size=40))
def test_the_first_response_carries_the_incarnation(records: list[bytes], next_offset: int,
                                                    end: int, incarnation: str) -> None:
    built = [pb.Record(topic="t", base_offset=i, batch=pb.EventBatch(count=1, values=[v]))
             .SerializeToString() for i, v in enumerate(records)]
    head = wire.incarnation_field(incarnation)
    parsed = pb.ReadResponse.FromString(head + wire.read_response(built, next_offset, end))
    assert parsed.incarnation == incarnation
    assert [r.SerializeToString() for r in parsed.records] == built
    assert (parsed.next_offset, parsed.end_offset) == (next_offset, end)
    assert (head == b"") == (incarnation == "")


def test_a_position_and_a_passed_position_carry_it_too() -> None:
    head = wire.incarnation_field("5f0c9a1e2b3d4c6a")
    position = pb.ReadResponse.FromString(head + wire.read_response([], 12, 40))
    assert (position.incarnation, position.next_offset, position.end_offset) == \
        ("5f0c9a1e2b3d4c6a", 12, 40)
    passed = pb.ReadResponse.FromString(head + wire.passed_response(12, 40, 7, 11))
    assert (passed.incarnation, passed.passed_scn, passed.passed_offset) == \
        ("5f0c9a1e2b3d4c6a", 7, 11)


def test_start_words() -> None:
    assert start_words(pb.StartPosition(offset=100)) == "offset 100"
    assert start_words(pb.StartPosition(offset=0)) == "offset 0"
    assert start_words(pb.StartPosition(scn=7)) == "SCN 7"
    assert start_words(pb.StartPosition(earliest=True)) == "earliest"
    assert start_words(pb.StartPosition(latest=True)) == "latest"
    assert start_words(pb.StartPosition()) == "an unset start"


def test_the_refusal_names_both_incarnations_and_is_topic_recreated() -> None:
    refusal = BrokerError("read_other_incarnation", topic="orders", partition=3,
                          start=start_words(pb.StartPosition(scn=7)),
                          expected="5f0c9a1e2b3d4c6a", current="9d2e7b4a1c0f3e58")
    assert refusal.code == grpc.StatusCode.FAILED_PRECONDITION
    assert refusal.message.startswith(
        "this read of 'orders'/3 from SCN 7 is of incarnation '5f0c9a1e2b3d4c6a' of the "
        "topic, which was deleted and created again (it is now incarnation "
        "'9d2e7b4a1c0f3e58')"), refusal.message
    assert "with a new reader" in refusal.message
    mapped = errors.from_rpc_error(rpc_error(refusal.code, refusal.message, refusal.kind.name), "127.0.0.1:6650")
    assert type(mapped) is errors.TopicRecreated
    assert isinstance(mapped, errors.FailedPrecondition)
    assert mapped.broker_error == "read_other_incarnation"
    assert mapped.code == errors.FAILED_PRECONDITION and mapped.message == refusal.message


def test_a_reader_takes_an_incarnation_as_text_only() -> None:
    from sdk.reader import Reader

    assert Reader("127.0.0.1:1", "t", 0, incarnation="5f0c9a1e2b3d4c6a").incarnation == \
        "5f0c9a1e2b3d4c6a"
    assert Reader("127.0.0.1:1", "t", 0).incarnation is None
    assert Reader("127.0.0.1:1", "t", 0, incarnation="").incarnation is None
    with pytest.raises(ValueError, match="incarnation 7 is invalid: the topic's incarnation"):
        Reader("127.0.0.1:1", "t", 0, incarnation=7)  # type: ignore[arg-type]


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_the_fields_reserve_of_a_chunk_holds_the_first_response_s_incarnation(
        next_offset: int, end: int) -> None:
    """A chunk's records fill bytes_max less RESPONSE_FIELDS_BYTES_MAX (read_path.py);
    the first response adds a broker-made incarnation to the other fields, and the
    whole still fits: a client with gRPC's default 4 MiB receive limit reads it."""
    head = wire.incarnation_field(new_incarnation())
    assert len(head) == INCARNATION_FIELD_BYTES_MAX
    fields = head + wire.read_response([], next_offset, end)
    high_watermark = 1 + 10  # a tag and the longest varint, sent beside them on a follow
    assert len(fields) + high_watermark <= RESPONSE_FIELDS_BYTES_MAX
