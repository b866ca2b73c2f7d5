"""A consumer's stream that grpcio ended on a failed write is not a lost broker until shown.

Goal: when a topic is deleted while a consumer acks, the broker ends the
stream with NOT_FOUND "topic 't' was deleted", but grpcio may fail the ack's
write on the ended call first and report INTERNAL "Internal error from Core"
in place of the broker's status (6 of 60 consumers acking hard in a probe
with a real broker). The consumer then logged "lost the broker ...
(connection closed); retrying" and ended with the reconnect's "topic 't' does
not exist; create it first". Now it asks the broker again at once, saying
nothing: refused "does not exist", it ends with "topic 't' was deleted" and
reports no lost broker; attached again, it carries on silently; and when
that attempt cannot reach the broker either (the connection really broke),
the lost broker is reported as before, once, with the first reason, and its
return too.

Method: the real Consumer over a fake stub whose Subscribe calls play
scripted answers (the first opens, then fails as grpcio does); bounded waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from sdk import TopicNotFound
from sdk.consumer import Consumer
from sdk.core.pb import keybus_pb2 as pb
from sdk.reconnect import Link, RetryPolicy, ended_on_write

BOUND_S = 5.0
BROKER = "127.0.0.1:1"
OPENED = pb.SubscribeResponse(opened=pb.Opened(partitions=[0], type=pb.SHARED))


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


WRITE_FAILED = rpc_error(grpc.StatusCode.INTERNAL, "Internal error from Core")
GONE = rpc_error(grpc.StatusCode.NOT_FOUND,
                 "topic 't' does not exist; create it first (keybus topics create t)")
REFUSED = rpc_error(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses; last "
                    "error: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: "
                    "Connection refused")


class ScriptedCall:
    """A Subscribe call answering its reads from a script, then ending cleanly once
    the consumer half-closes its requests (as the broker does on close)."""

    def __init__(self, script: list[Any], requests: AsyncIterator[Any]) -> None:
        self.script = script
        self._drain = asyncio.ensure_future(self._drained(requests))

    @staticmethod
    async def _drained(requests: AsyncIterator[Any]) -> None:
        async for _ in requests:
            pass

    async def read(self) -> Any:
        if self.script:
            answer = self.script.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer
        await asyncio.wait_for(asyncio.shield(self._drain), BOUND_S)
        return grpc.aio.EOF

    def cancel(self) -> bool:
        self._drain.cancel()
        return True


class ScriptedStub:
    """Each Subscribe takes the next script; none left is a test failure."""

    def __init__(self, *scripts: list[Any]) -> None:
        self.scripts = list(scripts)
        self.calls = 0

    def Subscribe(self, requests: Any) -> ScriptedCall:
        assert self.scripts, f"Subscribe called {self.calls + 1} times: more than scripted"
        self.calls += 1
        return ScriptedCall(self.scripts.pop(0), requests)


async def consumer_on(stub: ScriptedStub, told: list[tuple[bool, str]]) -> Consumer:
    consumer = Consumer(BROKER, "t", "s", type="shared", retry_backoff_ms=1,
                        on_connection_change=lambda up, text: told.append((up, text)))
    consumer._conn.stub = stub  # type: ignore[assignment]
    await consumer._attach()
    return consumer


async def until(check: Any, what: str) -> None:
    for _ in range(int(BOUND_S / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within {BOUND_S} s: {what}")


def test_a_write_failed_as_the_topic_was_deleted_reports_the_deletion_only() -> None:
    async def go() -> None:
        told: list[tuple[bool, str]] = []
        consumer = await consumer_on(ScriptedStub([OPENED, WRITE_FAILED], [GONE]), told)
        with pytest.raises(TopicNotFound) as caught:
            await consumer.receive(BOUND_S)
        assert told == [], "a lost broker was reported"
        assert str(caught.value) == "topic 't' was deleted"
        await consumer.close()
    asyncio.run(go())


def test_a_write_failed_with_the_broker_there_attaches_again_silently() -> None:
    async def go() -> None:
        told: list[tuple[bool, str]] = []
        stub = ScriptedStub([OPENED, WRITE_FAILED], [OPENED])
        consumer = await consumer_on(stub, told)
        first = consumer.stream
        await until(lambda: consumer.stream is not first, "attached again")
        assert told == [] and stub.calls == 2
        await consumer.close()
    asyncio.run(go())


def test_a_write_failed_on_a_broken_connection_is_a_lost_broker_once() -> None:
    async def go() -> None:
        told: list[tuple[bool, str]] = []
        stub = ScriptedStub([OPENED, WRITE_FAILED], [REFUSED], [REFUSED], [OPENED])
        consumer = await consumer_on(stub, told)
        await until(lambda: len(told) == 2, f"lost, then back: {told}")
        assert told[0] == (False, f"lost the broker at {BROKER} (connection closed); retrying")
        assert told[1][0] and told[1][1].startswith(f"the broker at {BROKER} is back after ")
        assert stub.calls == 4
        await consumer.close()
    asyncio.run(go())


def test_the_quiet_attempt_is_once_per_backoff_max() -> None:
    link = Link(BROKER, RetryPolicy(backoff_max_ms=2_000))
    link.process_connected(0)
    assert ended_on_write(WRITE_FAILED) and not ended_on_write(REFUSED)
    assert link.defer_report("connection closed", 1_000)
    assert link.process_connected(1_001) is None  # the broker answered: nothing to say
    assert not link.defer_report("connection closed", 2_999)  # again so soon: reported
    assert link.process_failure("connection closed", False, 2_999)[1] is not None
    assert not link.defer_report("connection closed", 9_000)  # lost already
