"""The producer names the broker it was talking to, as the Reader does.

Goal: every outage line and every error of the producer says which broker:
the WARNING when it loses the broker (`lost the broker at HOST:PORT (...)`) or
the broker refuses produce for now (`the broker at HOST:PORT cannot take
produce now (...)`), the INFO when it answers again, the DeliveryTimeout
(`no answer from the broker at HOST:PORT within delivery_timeout_ms=...`) and
the error a refused stream fails its events with (`the broker at HOST:PORT
refused the producer of topic 't': <its words>`). Before, none named it: with
several brokers ("h1:6650,h2:6650") an operator could not tell which one.
Method: a Sender whose `broker` (the producer's address of the moment, the
leader's with several brokers) is a plain function, and whose stub refuses as a
broker would. No broker, no network; the address is only text here (the
integration tests in test_sdk_connection.py and test_relay_zookeeper_loss.py
take it from real connections).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import grpc
import pytest

from sdk import errors
from sdk.core.pb import keybus_pb2 as pb
from sdk.send_queue import ProducerBatch
from sdk.sender import Sender, now_ms
from tests.unit.test_producer_columns import Token

DENIED = "principal 'app' may not produce to topic 't'"


def _batch(deadline_ms: int = 10**12) -> ProducerBatch:
    request = pb.ProduceRequest(topic="t", partition=0)
    request.batch.key_ints.append(1)
    request.batch.values.append(b"v")
    return ProducerBatch(request, 1, Token(), deadline_ms=deadline_ms, buffered=1)


def test_lost_refused_and_back_name_the_broker_of_the_moment(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="keybus.producer")
    address = ["127.0.0.1:7001"]

    async def go() -> None:
        sender = Sender(cast(Any, None), "t", 1, broker=lambda: address[0])
        sender._lost("connection refused")
        sender._reached()
        address[0] = "127.0.0.1:7002"  # the leader moved (several brokers)
        sender._lost("broker 127.0.0.1:7002 lost its ZooKeeper connection", refused=True)
        sender._reached()

    asyncio.run(go())
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == ("producer of topic 't' lost the broker at 127.0.0.1:7001 (connection "
                       "refused); retrying; events not answered within "
                       "delivery_timeout_ms=120000 fail")
    assert said[1].startswith("producer of topic 't': the broker at 127.0.0.1:7001 answers "
                              "again after ")
    assert said[2] == ("producer of topic 't': the broker at 127.0.0.1:7002 cannot take "
                       "produce now (broker 127.0.0.1:7002 lost its ZooKeeper connection); "
                       "retrying; events not answered within delivery_timeout_ms=120000 fail")
    assert said[3].startswith("producer of topic 't': the broker at 127.0.0.1:7002 answers "
                              "again after ")
    assert len(said) == 4


def test_a_delivery_timeout_names_the_broker_and_the_last_error() -> None:
    async def go() -> BaseException | None:
        sender = Sender(cast(Any, None), "t", 1, delivery_timeout_ms=400,
                        broker=lambda: "127.0.0.1:7001")
        sender._lost("connection refused")
        batch = _batch(deadline_ms=now_ms())  # due at once; the loop looks each 100 ms
        sender.queue.add(batch)
        expiry = asyncio.create_task(sender._expire_loop())
        try:
            async with asyncio.timeout(10):
                while not batch.token.done():
                    await asyncio.sleep(0.05)
        finally:
            expiry.cancel()
        return cast(Token, batch.token).outcome

    outcome = asyncio.run(go())
    assert isinstance(outcome, errors.DeliveryTimeout)
    assert str(outcome) == ("no answer from the broker at 127.0.0.1:7001 within "
                            "delivery_timeout_ms=400 (last error: connection refused); the "
                            "events may or may not be stored")


class _Denied(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.PERMISSION_DENIED

    def details(self) -> str:
        return DENIED

    def trailing_metadata(self) -> Any:
        return (("keybus-error", "permission_denied"),)


class _RefusedCall:
    """A Produce stream the broker refuses at open."""

    async def read(self) -> Any:
        raise _Denied()

    async def write(self, request: Any) -> None:
        await asyncio.sleep(0)

    def cancel(self) -> None:
        pass


class _Stub:
    def Produce(self) -> _RefusedCall:  # gRPC's method name
        return _RefusedCall()

    async def InitProducer(self, request: Any, timeout: float) -> Any:
        raise _Denied()


def test_a_refused_stream_fails_its_events_naming_the_broker() -> None:
    async def go() -> ProducerBatch:
        sender = Sender(cast(Any, _Stub()), "t", 1, broker=lambda: "127.0.0.1:7001")
        sender.queue.reinit(5, [0])
        batch = _batch()
        sender.queue.add(batch)
        assert await sender._run_stream() is True  # failed, nothing to back off for
        return batch

    outcome = cast(Token, asyncio.run(go()).token).outcome
    assert isinstance(outcome, errors.PermissionDenied)  # its kind and code kept
    assert outcome.code == errors.PERMISSION_DENIED and outcome.broker_error == "permission_denied"
    assert str(outcome) == f"the broker at 127.0.0.1:7001 refused the producer of topic 't': {DENIED}"


def test_a_refused_init_producer_fails_its_events_naming_the_broker() -> None:
    async def go() -> ProducerBatch:
        sender = Sender(cast(Any, _Stub()), "t", 1, broker=lambda: "127.0.0.1:7001")
        batch = _batch()
        sender.queue.add(batch)
        sender.queue.needs_reinit = True
        assert await sender._try_reinit() is True
        return batch

    outcome = cast(Token, asyncio.run(go()).token).outcome
    assert isinstance(outcome, errors.PermissionDenied)
    assert str(outcome) == f"the broker at 127.0.0.1:7001 refused the producer of topic 't': {DENIED}"
