"""A client that was attached to a topic and finds it gone on a reopen is told it was deleted.

Goal: a reader (log or bootstrap: both read through RetryingCall) whose stream
broke (a lost broker, retried) and whose reopen the broker refuses with "topic
'T' does not exist; create it first" ends with "topic 'T' was deleted", as a
consumer reconnecting after the delete does (sdk/consumer_link.py): the user
had been reading the topic, so "create it first" would be wrong advice. A
first open of a topic that is not there keeps the broker's words.
Method: a scripted call that fails as grpc.aio does (AioRpcError;
tests/support/scripted_call.py), the real RetryingCall and ConsumerLink; bounded.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio
import pytest

from sdk import errors
from sdk.consumer_link import ConsumerLink
from sdk.reconnect import RetryPolicy
from sdk.retrying_call import RetryingCall
from tests.support.scripted_call import ScriptedCall, rpc_error

MISSING = "topic 't' does not exist; create it first (keybus topics create t)"
REFUSED = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7: "
           "Failed to connect to remote host: Connection refused")


def read_all(answers: ScriptedCall, topic: str) -> list[Any]:
    async def go() -> list[Any]:
        stream = RetryingCall(answers.open, True, 5_000, 1, 2, broker="127.0.0.1:7",
                              on_connection_change=lambda up, text: None, topic=topic)
        got = []
        async with asyncio.timeout(5):
            while (message := await stream.read()) is not None:
                got.append(message)
        return got
    return asyncio.run(go())


def test_a_reader_whose_reopen_finds_no_topic_is_told_it_was_deleted() -> None:
    answers = ScriptedCall(["batch", rpc_error(grpc.StatusCode.UNAVAILABLE, "Socket closed"),
                       rpc_error(grpc.StatusCode.NOT_FOUND, MISSING)])
    with pytest.raises(errors.TopicNotFound) as raised:
        read_all(answers, "t")
    assert answers.opened == 2
    assert str(raised.value) == "topic 't' was deleted"


def test_a_first_read_of_a_missing_topic_keeps_the_brokers_words() -> None:
    answers = ScriptedCall([rpc_error(grpc.StatusCode.NOT_FOUND, MISSING)])
    with pytest.raises(errors.TopicNotFound) as raised:
        read_all(answers, "t")
    assert str(raised.value) == MISSING


def test_another_topics_absence_is_not_taken_for_this_ones_delete() -> None:
    other = "topic 'u' does not exist; create it first (keybus topics create u)"
    answers = ScriptedCall(["batch", rpc_error(grpc.StatusCode.UNAVAILABLE, "Socket closed"),
                       rpc_error(grpc.StatusCode.NOT_FOUND, other)])
    with pytest.raises(errors.TopicNotFound) as raised:
        read_all(answers, "t")
    assert str(raised.value) == other


@pytest.mark.parametrize(("reconnecting", "said"), [(True, "topic 't' was deleted"),
                                                    (False, MISSING)])
def test_a_consumer_reopen_that_finds_no_topic_says_it_was_deleted(
        reconnecting: bool, said: str) -> None:
    """The consumer's path (also taken at once, unreported, after grpcio failed an
    ack's write on the stream the delete ended)."""
    link = ConsumerLink("127.0.0.1:7", "t", RetryPolicy(5_000, 0, 1, 2), True, None,
                        lambda up, text: None)

    async def go() -> None:
        await link.open_failed(rpc_error(grpc.StatusCode.NOT_FOUND, MISSING), reconnecting)
    with pytest.raises(errors.TopicNotFound) as raised:
        asyncio.run(go())
    assert str(raised.value) == said


RECREATED = ("this read of 't'/0 from offset 3 is of incarnation 'a' of the topic, which was "
             "deleted and created again (it is now incarnation 'b'): ...")


@pytest.mark.parametrize(("ending", "raised"), [
    (rpc_error(grpc.StatusCode.NOT_FOUND, MISSING), errors.TopicNotFound),
    (rpc_error(grpc.StatusCode.FAILED_PRECONDITION, RECREATED, "read_other_incarnation"),
     errors.TopicRecreated),
], ids=["deleted", "recreated"])
def test_a_lost_broker_that_answers_the_reopen_with_an_end_is_said_back_first(
        ending: grpc.aio.AioRpcError, raised: type[errors.KeybusError]) -> None:
    """`keybus read --follow` printed "lost the broker ... retrying" and then the error,
    never that the broker answered: the user could not tell a refusal from an outage."""
    said: list[tuple[bool, str]] = []
    answers = ScriptedCall(["batch", rpc_error(grpc.StatusCode.UNAVAILABLE, "Socket closed"),
                       rpc_error(grpc.StatusCode.UNAVAILABLE, REFUSED), ending])

    async def go() -> None:
        stream = RetryingCall(answers.open, True, 5_000, 1, 2, broker="127.0.0.1:7",
                              on_connection_change=lambda up, text: said.append((up, text)),
                              topic="t")
        async with asyncio.timeout(5):
            while await stream.read() is not None:
                pass
    with pytest.raises(raised):
        asyncio.run(go())
    assert [up for up, _ in said] == [False, True]
    assert said[1][1].startswith("the broker at 127.0.0.1:7 is back after ")


def test_a_broker_never_lost_says_nothing_before_the_end() -> None:
    said: list[tuple[bool, str]] = []
    answers = ScriptedCall(["batch", rpc_error(grpc.StatusCode.NOT_FOUND, MISSING)])

    async def go() -> None:
        stream = RetryingCall(answers.open, True, 5_000, 1, 2, broker="127.0.0.1:7",
                              on_connection_change=lambda up, text: said.append((up, text)),
                              topic="t")
        while await stream.read() is not None:
            pass
    with pytest.raises(errors.TopicNotFound):
        asyncio.run(go())
    assert said == []


def test_a_consumer_that_lost_its_broker_is_told_it_is_back_before_the_delete() -> None:
    """`keybus consume` printed "lost the broker ... retrying" and then "topic 't' was
    deleted": the broker answered, and the consumer now says so first, as the Reader."""
    said: list[tuple[bool, str]] = []
    link = ConsumerLink("127.0.0.1:7", "t", RetryPolicy(5_000, 0, 1, 2), True, None,
                        lambda up, text: said.append((up, text)))

    async def go() -> None:
        link.connected()
        await link.retry_after(rpc_error(grpc.StatusCode.UNAVAILABLE, "Socket closed"))
        await link.open_failed(rpc_error(grpc.StatusCode.UNAVAILABLE, REFUSED), True)
        await link.open_failed(rpc_error(grpc.StatusCode.NOT_FOUND, MISSING), True)
    with pytest.raises(errors.TopicNotFound, match="topic 't' was deleted"):
        asyncio.run(asyncio.wait_for(go(), 5))
    assert [up for up, _ in said] == [False, True]
    assert said[1][1].startswith("the broker at 127.0.0.1:7 is back after ")
