"""A producer with several brokers, none leading: said once, then quiet.

Goal: while the producer has lost its broker (reported once at WARNING), each
retry's "no leader found yet" is DEBUG, not one INFO line per retry; a first
such answer, before anything was lost, stays INFO.
Method: a Sender whose `relocate` (sdk/cluster.py's leader lookup) always
fails as with no broker answering; its stub is never called.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import grpc
import pytest

from sdk import errors
from sdk.sender import Sender


async def _no_leader() -> Any:
    raise errors.Unavailable("no broker of 127.0.0.1:1,127.0.0.1:2 answers", errors.UNAVAILABLE)


def test_no_leader_found_is_said_once_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="keybus.producer")

    async def go() -> None:
        sender = Sender(cast(Any, None), "t", 1, relocate=_no_leader)
        await sender._find_leader()  # not lost yet: worth an INFO
        sender._lost("connection refused")
        for _ in range(5):
            await sender._find_leader()

    asyncio.run(go())
    levels = [(r.levelno, r.getMessage()[:30]) for r in caplog.records]
    assert levels == [(logging.INFO, "topic 't': no leader found yet"),
                      (logging.WARNING, "producer of topic 't' lost the"),
                      *[(logging.DEBUG, "topic 't': no leader found yet")] * 5]


class _Call:
    """A Produce stream that stays open and silent (the broker froze under it)."""

    async def read(self) -> Any:
        await asyncio.Event().wait()

    async def write(self, request: Any) -> None:
        raise AssertionError("nothing is queued: nothing is written")

    def cancel(self) -> None:
        pass


class _DeadlineExceeded(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self) -> str:
        return "Deadline Exceeded"


class _Stub:
    """The stream opens; the InitProducer it needs first gets no answer in time."""

    def Produce(self) -> _Call:  # gRPC's method names
        return _Call()

    async def InitProducer(self, request: Any, timeout: float) -> Any:
        raise _DeadlineExceeded()


def test_a_broken_stream_is_said_once_in_words_never_as_a_repr(
        caplog: pytest.LogCaptureFixture) -> None:
    """`keybus produce` prints INFO and above: it showed `produce stream for topic 't'
    broke (KeybusError('Deadline Exceeded')); reconnecting` above the WARNING that
    says the same in words."""
    caplog.set_level(logging.DEBUG, logger="keybus.producer")

    async def go() -> None:
        sender = Sender(cast(Any, _Stub()), "t", 1)
        sender.queue.needs_reinit = True  # as after a stream the broker ended mid-batch
        assert await sender._run_stream() is False  # a backoff is due: the broker is lost

    asyncio.run(go())
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert said == ["producer of topic 't' lost the broker (Deadline Exceeded); retrying; "
                    "events not answered within delivery_timeout_ms=120000 fail"]
    assert not any("Error(" in r.getMessage() for r in caplog.records)  # not even at DEBUG
