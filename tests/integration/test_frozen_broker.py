"""Never stuck, never silent, also when the broker freezes with its connections open.

Goal: a broker process that stops answering but keeps its TCP connections
(SIGSTOP here; a hung process or a dead link that sends no reset alike) is a
lost broker within about keepalive time + timeout (sdk/channel.py): a
consumer says so through on_connection_change and a producer with an event
waiting says so on its logger; after SIGCONT the consumer says the broker is
back and receives what was sent during the freeze and after it, in order. And
the keepalive pings that find a frozen broker do not end healthy idle streams:
the broker accepts them (no GOAWAY too_many_pings), so a consumer idle for
several ping intervals receives without a reconnect.
Method: a real broker process, SIGSTOP / SIGCONT (always resumed in finally).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable

import pytest

from sdk import Admin, Consumer, Producer
from sdk.core.keepalive import KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS
from tests.support.broker_process import BrokerProcess

# A frozen broker is found by the first unanswered ping: at most keepalive time
# + timeout after the last frame, plus scheduling slack on a busy machine.
LOST_WITHIN_S = (KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS) / 1000 + 5
# Longer than the 4 pings after which gRPC's default server policy (2 strikes
# allowed) ends an idle stream with GOAWAY too_many_pings.
IDLE_S = 4.5 * KEEPALIVE_TIME_MS / 1000


async def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        await asyncio.sleep(0.05)


def _pid(broker: BrokerProcess) -> int:
    assert broker.process is not None
    return broker.process.pid


def test_frozen_broker_is_told_within_seconds_and_work_resumes(
        broker: BrokerProcess, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="keybus")
    told: list[tuple[float, bool, str]] = []

    def said(text: str) -> bool:
        return any(r.levelno == logging.WARNING and text in r.getMessage()
                   for r in caplog.records)

    async def go() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("frozen", 1)
        consumer = await Consumer.subscribe(
            broker.address, "frozen", "s",
            on_connection_change=lambda up, text: told.append((time.monotonic(), up, text)))
        async with await Producer.create(broker.address, "frozen") as producer:
            await (await producer.send(1, b"before"))
            batch = await consumer.receive_batch(20)
            assert batch.values == [b"before"]
            consumer.ack_batch(batch)
            os.kill(_pid(broker), signal.SIGSTOP)
            frozen_at = time.monotonic()
            try:
                during = await producer.send(2, b"during")
                await _wait_for(lambda: bool(told), LOST_WITHIN_S, "the frozen broker to be told")
                assert not during.done()
                at, up, text = told[0]
                assert not up and text == (
                    f"lost the broker at {broker.address} (no answer to a keepalive ping within "
                    f"{KEEPALIVE_TIMEOUT_MS / 1000:g} s: the broker is frozen, overloaded or "
                    "cut off); retrying")
                assert at - frozen_at < LOST_WITHIN_S
                await _wait_for(lambda: said(f"producer of topic 'frozen' lost the broker at "
                                             f"{broker.address} (no answer to a keepalive ping"),
                                LOST_WITHIN_S, "the producer's warning")
            finally:
                os.kill(_pid(broker), signal.SIGCONT)
            await _wait_for(lambda: len(told) >= 2, 30, "the broker back")
            assert [up for _, up, _ in told] == [False, True]
            assert told[1][2].startswith(f"the broker at {broker.address} is back after ")
            await asyncio.wait_for(during, 30)
            await (await producer.send(3, b"after"))
        received: list[bytes] = []
        while len(received) < 2:
            batch = await consumer.receive_batch(20)
            received.extend(batch.values)
            consumer.ack_batch(batch)
        assert received == [b"during", b"after"]
        await consumer.close()

    asyncio.run(go())


def test_idle_consumer_keeps_its_stream_through_keepalive_pings(broker: BrokerProcess) -> None:
    told: list[tuple[bool, str]] = []

    async def go() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("idle", 1)
        consumer = await Consumer.subscribe(
            broker.address, "idle", "s",
            on_connection_change=lambda up, text: told.append((up, text)))
        stream = consumer.stream
        await asyncio.sleep(IDLE_S)  # pings flow, no data
        async with await Producer.create(broker.address, "idle") as producer:
            await (await producer.send(1, b"later"))
        batch = await consumer.receive_batch(20)
        assert batch.values == [b"later"]
        consumer.ack_batch(batch)
        assert told == []
        assert consumer.stream is stream  # the same stream: never reconnected
        await consumer.close()

    asyncio.run(go())
