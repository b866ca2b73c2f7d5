"""A follower's lost stream to its upstream is said with the status code and the
upstream's words, as a failed copy attempt is.

Goal: the line a follower logs when the Reader loses its stream names the topic,
the partition, the upstream, the gRPC status code and the details:
`topic t/0: lost the stream from upstream H:P (UNAVAILABLE: connection refused);
retrying`, so an operator tells an upstream that went away from one that answered
and refused (UNAVAILABLE with its reason, or another code). Before, the follower
logged the SDK's `lost the broker at H:P (connection closed); retrying`: no topic,
no code, and a refusal's reason cut to its first clause; describe showed the same.
Method: the Reader's report path as it runs: a RetryingCall (the Reader's stream)
whose calls fail with real grpc.aio.AioRpcError objects, its failure read back as
`last_failure`; the follower's `_stream_changed` with a reader that carries one
(no broker, no channel: nothing is started).
"""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any, cast

import grpc
import grpc.aio
import pytest

from broker.relay.copy_state import CopyState
from broker.relay.follower import TopicFollower
from sdk.retrying_call import RetryingCall

UPSTREAM = "127.0.0.1:7001"
REFUSED = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7001: "
           "Failed to connect to remote host: connect: Connection refused (111)")
# broker/errors.py's leadership_unconfirmed, as the upstream words it
NO_ZOOKEEPER = ("broker 127.0.0.1:7001 lost its ZooKeeper connection and cannot confirm "
                "that it still leads topic 't'; nothing is acknowledged until it can (retry)")


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details,
                                "UNKNOWN:Error received from peer")


def _follower() -> TopicFollower:
    relay = SimpleNamespace(client_security=None)  # only what the constructor reads
    return TopicFollower("t", UPSTREAM, 1, cast(Any, None), cast(Any, relay), None)


@pytest.mark.parametrize(("failure", "words"), [
    (rpc_error(grpc.StatusCode.UNAVAILABLE, REFUSED), "UNAVAILABLE: connection refused"),
    (rpc_error(grpc.StatusCode.UNAVAILABLE, "Socket closed"), "UNAVAILABLE: Socket closed"),
    (rpc_error(grpc.StatusCode.UNAVAILABLE, NO_ZOOKEEPER), f"UNAVAILABLE: {NO_ZOOKEEPER}"),
    (rpc_error(grpc.StatusCode.INTERNAL, "the read failed: IO error"),
     "INTERNAL: the read failed: IO error"),
])
def test_a_lost_stream_names_the_code_and_the_upstreams_words(
        failure: grpc.RpcError, words: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="keybus")
    follower, state = _follower(), CopyState()
    reader = SimpleNamespace(partition=3, last_failure=failure)
    follower._stream_changed(state, cast(Any, reader), False,
                             f"lost the broker at {UPSTREAM} (connection closed); retrying")
    follower._stream_changed(state, cast(Any, reader), True,
                             f"the broker at {UPSTREAM} is back after 2.0 s")
    said = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert said == [
        ("keybus.relay", logging.WARNING,
         f"topic t/3: lost the stream from upstream {UPSTREAM} ({words}); retrying"),
        ("keybus.relay", logging.INFO,
         f"topic t/3: the broker at {UPSTREAM} is back after 2.0 s; copying")]
    assert state.error == words  # what describe and cluster status show, as a failed copy's
    assert state.unreachable_since_ms > 0


class _Call:
    """One attempt of a server-streaming call: `answers` messages, then `failure`."""

    def __init__(self, answers: int, failure: grpc.RpcError | None) -> None:
        self.answers, self.failure = answers, failure

    async def read(self) -> Any:
        if self.answers:
            self.answers -= 1
            return object()
        if self.failure is not None:
            raise self.failure
        await asyncio.Event().wait()  # open, silent

    def cancel(self) -> None:
        pass


def test_the_readers_stream_keeps_the_failure_it_reported() -> None:
    """What the follower reads back: the failure behind the (False, message) report."""
    failure = rpc_error(grpc.StatusCode.UNAVAILABLE, NO_ZOOKEEPER)
    calls = iter([_Call(1, failure), _Call(1, None)])
    told: list[tuple[bool, str, Any]] = []

    async def go() -> None:
        stream: RetryingCall
        stream = RetryingCall(lambda: next(calls), True, None, 1, 1, broker=UPSTREAM,
                              on_connection_change=lambda up, message: told.append(
                                  (up, message, stream.last_failure)))
        assert stream.last_failure is None
        for _ in range(2):
            await asyncio.wait_for(stream.read(), 5)

    asyncio.run(go())
    assert [(up, failure_then) for up, _, failure_then in told] == [(False, failure),
                                                                    (True, failure)]
    assert told[0][1].startswith(f"lost the broker at {UPSTREAM} (broker ")  # cut at ";"
