"""A bootstrap is of one incarnation of its topic, as a log read is.

Goal: the broker's first Bootstrap message names the topic's incarnation
(`BootstrapResponse.incarnation`, bytes put before the hand-built message, as
for a Read), and a request naming another is refused with
`bootstrap_other_incarnation` (FAILED_PRECONDITION), naming both incarnations,
where the bootstrap stood and what to do; the SDK maps that name to
TopicRecreated. The SDK's BootstrapStream learns the incarnation from the first
message (or takes the one given) and sends it with every reopen, so a stream
that comes back to a topic deleted and created again fails instead of resuming
the old topic's snapshot key or offset in the new one. The old code sent none
and named none: the reopen read the new topic on silently.
Method: hypothesis over hand-built messages parsed with the generated class;
a grpc.RpcError stand-in with the broker's status and error name; the real
BootstrapStream and RetryingCall over a scripted call (tests/support).
"""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import BrokerError
from broker.rpc import wire
from broker.rpc.bootstrap_servicer import resume_words
from broker.topics import new_incarnation
from broker.view.bootstrap import INCARNATION_TAG
from broker.view.bootstrap import response as bootstrap_response
from sdk import errors
from sdk.bootstrap import BootstrapStream
from sdk.core.pb import keybus_pb2 as pb
from tests.support.scripted_call import ScriptedCall, rpc_error

OLD, NEW = "5f0c9a1e2b3d4c6a", "9d2e7b4a1c0f3e58"


@given(st.lists(st.binary(max_size=200), max_size=3), st.integers(0, 2**64 - 1),
       st.integers(0, 2**64 - 1), st.sampled_from([pb.SNAPSHOT, pb.CATCHUP, pb.ONLINE]),
       st.text(max_size=40))
def test_the_first_message_carries_the_incarnation(records: list[bytes], next_offset: int,
                                                   end: int, phase: int,
                                                   incarnation: str) -> None:
    built = [pb.Record(topic="t", base_offset=i, batch=pb.EventBatch(count=1, values=[v]))
             .SerializeToString() for i, v in enumerate(records)]
    resume = pb.BootstrapResume(phase=phase, next_offset=next_offset, target_offset=end)
    marker = pb.BootstrapMarker(phase=phase, snapshot_offset=next_offset)
    head = wire.incarnation_field(incarnation, INCARNATION_TAG)
    parsed = pb.BootstrapResponse.FromString(
        head + bootstrap_response(built, next_offset, end, phase, resume, marker))
    assert parsed.incarnation == incarnation
    assert [r.SerializeToString() for r in parsed.records] == built
    assert (parsed.next_offset, parsed.end_offset, parsed.phase) == (next_offset, end, phase)
    assert parsed.resume == resume and parsed.marker == marker


def test_a_made_up_or_overlong_incarnation_is_not_named() -> None:
    made = new_incarnation()
    assert pb.BootstrapResponse.FromString(wire.first_response_head(
        made, False, INCARNATION_TAG)).incarnation == made
    assert wire.first_response_head(made, True, INCARNATION_TAG) == b""  # backfilled
    assert wire.first_response_head("x" * 17, False, INCARNATION_TAG) == b""
    assert pb.ReadResponse.FromString(wire.first_response_head(made, False)).incarnation == made


def test_resume_words() -> None:
    assert resume_words(pb.BootstrapRequest()) == "a new snapshot"
    assert resume_words(pb.BootstrapRequest(resume=pb.BootstrapResume(
        phase=pb.SNAPSHOT, snapshot_offset=60, has_source=True, source="s"))) == \
        "the snapshot as of offset 60"
    assert resume_words(pb.BootstrapRequest(resume=pb.BootstrapResume(
        phase=pb.CATCHUP, next_offset=70, target_offset=80))) == "the catch-up at offset 70"
    assert resume_words(pb.BootstrapRequest(resume=pb.BootstrapResume(
        phase=pb.ONLINE, next_offset=90))) == "online at offset 90"


def _refusal() -> BrokerError:
    return BrokerError("bootstrap_other_incarnation", topic="orders", partition=3,
                       position="the catch-up at offset 70", expected=OLD, current=NEW)


def test_the_refusal_names_both_incarnations_and_is_topic_recreated() -> None:
    refusal = _refusal()
    assert refusal.code == grpc.StatusCode.FAILED_PRECONDITION
    assert refusal.message.startswith(
        f"this bootstrap of 'orders'/3 (the catch-up at offset 70) is of incarnation '{OLD}' "
        f"of the topic, which was deleted and created again (it is now incarnation '{NEW}')"
    ), refusal.message
    assert "bootstrap the new one from a new snapshot" in refusal.message
    mapped = errors.from_rpc_error(rpc_error(refusal.code, refusal.message, refusal.kind.name), "127.0.0.1:6650")
    assert type(mapped) is errors.TopicRecreated
    assert mapped.broker_error == "bootstrap_other_incarnation"
    assert mapped.message == refusal.message


def _message(phase: int, next_offset: int, incarnation: str = "") -> pb.BootstrapResponse:
    record = pb.Record(topic="t", base_offset=next_offset - 1,
                       batch=pb.EventBatch(count=1, key_ints=[1], values=[b"v"]))
    return pb.BootstrapResponse(
        records=[record], next_offset=next_offset, end_offset=100, phase=phase,
        resume=pb.BootstrapResume(phase=phase, next_offset=next_offset, target_offset=50),
        incarnation=incarnation)


class _Broker:
    """The stub's Bootstrap method over one script; keeps every request it was sent."""

    def __init__(self, script: ScriptedCall) -> None:
        self.script = script
        self.requests: list[pb.BootstrapRequest] = []

    def connect(self) -> _Broker:
        return self

    def __call__(self, request: pb.BootstrapRequest) -> ScriptedCall:
        self.requests.append(request)
        return self.script.open()


def _stream(broker: _Broker, incarnation: str = "") -> BootstrapStream:
    return BootstrapStream(broker.connect, pb.BootstrapRequest(
        topic="t", incarnation=incarnation), None, False, 10_000, 1, 1,
        connect_timeout_ms=5_000, broker="127.0.0.1:1", topic="t")


def test_a_reopen_sends_the_incarnation_the_first_message_named() -> None:
    lost = rpc_error(grpc.StatusCode.UNAVAILABLE, "connection reset")
    broker = _Broker(ScriptedCall([_message(pb.CATCHUP, 10, OLD), lost,
                                   _message(pb.CATCHUP, 11), grpc.aio.EOF]))
    stream = _stream(broker)
    assert stream.incarnation is None

    async def go() -> None:
        first = await stream.next_item()
        assert first is not None and stream.incarnation == OLD
        assert await stream.next_item() is not None
        assert await stream.next_item() is None
    asyncio.run(go())
    assert [r.incarnation for r in broker.requests] == ["", OLD]  # the old code: ["", ""]
    assert broker.requests[1].resume.next_offset == 10


def test_a_reopen_refused_for_another_incarnation_raises_topic_recreated() -> None:
    lost = rpc_error(grpc.StatusCode.UNAVAILABLE, "connection reset")
    refused = rpc_error(grpc.StatusCode.FAILED_PRECONDITION, _refusal().message,
                        "bootstrap_other_incarnation")
    broker = _Broker(ScriptedCall([_message(pb.ONLINE, 10, OLD), lost, refused]))
    stream = _stream(broker)

    async def go() -> None:
        assert await stream.next_item() is not None
        with pytest.raises(errors.TopicRecreated, match=f"it is now incarnation '{NEW}'"):
            await stream.next_item()
    asyncio.run(go())
    assert broker.script.opened == 2  # not retried
    assert broker.requests[1].incarnation == OLD


def test_an_incarnation_given_is_sent_at_the_first_open_and_kept() -> None:
    broker = _Broker(ScriptedCall([_message(pb.SNAPSHOT, 1, NEW), grpc.aio.EOF]))
    stream = _stream(broker, OLD)  # a broker naming another would refuse; this one names NEW
    assert stream.incarnation == OLD
    asyncio.run(stream.next_item())
    assert stream.incarnation == OLD and broker.requests[0].incarnation == OLD


def test_a_bootstrap_reader_sends_the_incarnation_given() -> None:
    from sdk.reader import Reader

    reader = Reader("127.0.0.1:1", "t", 0, start="bootstrap", incarnation=OLD)
    assert reader.incarnation == OLD
    assert reader._bootstrap is not None and reader._bootstrap.incarnation == OLD
