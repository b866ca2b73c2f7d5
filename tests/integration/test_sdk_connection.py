"""Never stuck, never silent: SDK clients and a broker that is away.

Goal: every client fails within seconds with one sentence when no broker
answers (`cannot reach broker at HOST:PORT: connection refused — is it
running? (keybus broker)`); a consumer and a following reader that lose their
broker say so through on_connection_change while they retry, say when it is
back, and carry on; retry_timeout_ms bounds the retrying. Without a callback
the consumer says it as a WARNING on the `keybus` logger, and so does a
producer, whose events wait meanwhile: sent during the outage they are stored
when the broker is back, or fail after delivery_timeout_ms naming the last
error seen.
Method: a closed port on 127.0.0.1, and a real broker process killed with
SIGKILL and restarted on the same port and data directory.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sdk import (
    Admin,
    Consumer,
    DeliveryTimeout,
    Producer,
    Reader,
    SyncConsumer,
    TopicReader,
    Unavailable,
)
from sdk.reader import read_all
from tests.support.broker_process import BrokerProcess, free_port


def refused(port: int) -> str:
    return (f"cannot reach broker at 127.0.0.1:{port}: connection refused — is it running? "
            "(keybus broker)")


async def _list(address: str) -> Any:
    async with Admin(address) as admin:
        return await admin.list_topics()


async def _produce(address: str) -> Any:
    return await Producer.create(address, "t")


async def _read(address: str) -> Any:
    async with Reader(address, "t", 0) as reader:
        return [b async for b in reader]


async def _read_topic(address: str) -> Any:
    async with TopicReader(address, "t", follow=True) as reader:
        return [b async for b in reader]


async def _subscribe(address: str) -> Any:
    return await Consumer.subscribe(address, "t", "s")


@pytest.mark.parametrize("call", [_list, _produce, _read, _read_topic, _subscribe])
def test_no_broker_fails_within_seconds_in_one_sentence(
        call: Callable[[str], Awaitable[Any]]) -> None:
    port = free_port()
    began = time.monotonic()
    with pytest.raises(Unavailable) as caught:
        asyncio.run(asyncio.wait_for(call(f"127.0.0.1:{port}"), 30))
    assert str(caught.value) == refused(port)
    assert time.monotonic() - began < 8


def test_sync_consumer_no_broker_fails_within_seconds() -> None:
    port = free_port()
    with pytest.raises(Unavailable, match="connection refused — is it running"):
        SyncConsumer(f"127.0.0.1:{port}", "t", "s", connect_timeout_ms=1_000)


async def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_lost_broker_is_told_while_retrying_and_work_resumes(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    told: dict[str, list[tuple[bool, str]]] = {"consumer": [], "reader": []}

    async def go() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("away", 2)
        consumer = await Consumer.subscribe(
            broker.address, "away", "s", type="shared",
            on_connection_change=lambda up, text: told["consumer"].append((up, text)))
        reader = TopicReader(broker.address, "away", follow=True, start="latest",
                             on_connection_change=lambda up, text: told["reader"].append((up, text)))
        await reader.open()
        await asyncio.sleep(0.5)  # both streams open, at the end of the log
        stream = consumer.stream
        assert stream is not None and await stream.confirm(10)  # a round trip says it is up
        broker.kill()
        # Killed this instant: grpcio may not have seen the socket close, the probe does.
        assert not await stream.confirm(10)
        await _wait_for(lambda: all(told.values()), 20, "the lost broker to be told")
        for events in told.values():
            assert events == [(False, f"lost the broker at {broker.address} (connection "
                                      "closed); retrying")]
        await asyncio.to_thread(broker.start)
        await _wait_for(lambda: all(len(v) == 2 for v in told.values()), 30, "the broker back")
        for events in told.values():
            up, text = events[1]
            assert up and text.startswith(f"the broker at {broker.address} is back after ")
        assert consumer.stream is not stream and not await stream.confirm(10)
        assert consumer.stream is not None and await consumer.stream.confirm(10)
        # The lost stream's request side ended with it: only the new stream's is left
        # (before, one grpcio task per reconnect waited on a dead queue for good).
        assert _request_senders() == 1
        async with await Producer.create(broker.address, "away") as producer:
            await producer.send(7, b"after", partition=1)
            await producer.flush()
        assert (await consumer.receive(20)).value == b"after"
        batch = await asyncio.wait_for(reader.__anext__(), 20)
        assert batch.values[0] == b"after"
        await reader.close()
        await consumer.close()

    try:
        asyncio.run(go())
    finally:
        broker.stop()


def _request_senders() -> int:
    """grpcio's tasks that send a stream's requests, still running."""
    return len([task for task in asyncio.all_tasks() if not task.done()
                and "_consume_request_iterator" in getattr(task.get_coro(), "__qualname__", "")])


def test_without_callbacks_a_lost_broker_is_logged_and_a_timeout_names_the_cause(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    caplog.set_level(logging.INFO, logger="keybus")

    def said(level: int, text: str) -> bool:
        return any(r.levelno == level and text in r.getMessage() for r in caplog.records)

    async def go() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("quiet", 1)
        consumer = await Consumer.subscribe(broker.address, "quiet", "s")
        producer = await Producer.create(broker.address, "quiet")
        short = await Producer.create(broker.address, "quiet", delivery_timeout_ms=3_000)
        await (await producer.send(1, b"before"))
        broker.kill()
        waiting = await producer.send(2, b"during")  # stored once the broker is back
        began = time.monotonic()
        with pytest.raises(DeliveryTimeout, match=re.escape(
                f"no answer from the broker at {broker.address} within delivery_timeout_ms="
                "3000 (last error: connection ") + r"(refused|closed)\); the events may or may not"):
            await (await short.send(3, b"lost"))
        assert time.monotonic() - began < 10
        await _wait_for(lambda: said(logging.WARNING, "producer of topic 'quiet' lost the "
                                     f"broker at {broker.address} (connection") and said(
            logging.WARNING, f"lost the broker at {broker.address} (connection"), 20,
            "the producer and the consumer to say the broker is lost")
        await asyncio.to_thread(broker.start)
        assert (await asyncio.wait_for(waiting, 30)).offset == 1
        await _wait_for(lambda: said(logging.INFO, "producer of topic 'quiet': the broker "
                                     f"at {broker.address} answers again after") and said(
            logging.INFO, f"the broker at {broker.address} is back after"), 30, "the return")
        assert [m.value for m in [await consumer.receive(20), await consumer.receive(20)]] == \
            [b"before", b"during"]
        for client in (short, producer, consumer):
            await client.close()

    try:
        asyncio.run(go())
    finally:
        broker.stop()


def test_a_second_delivery_timeout_in_one_outage_names_the_cause_too(tmp_path: Path) -> None:
    """The first timeout forces a new producer id, so the next attempts are
    InitProducer calls, not streams: their failure is told in the same words
    ("connection refused"), not gRPC's resolver and socket text; once the broker
    is back a send is stored."""
    broker = BrokerProcess(tmp_path / "data")
    broker.start()

    async def go() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("twice", 1)
        producer = await Producer.create(broker.address, "twice", delivery_timeout_ms=2_000)
        await (await producer.send(1, b"before"))
        broker.kill()
        for key in (2, 3):
            with pytest.raises(DeliveryTimeout) as caught:
                await asyncio.wait_for(await producer.send(key, b"lost"), 30)
            assert "(last error: connection refused)" in str(caught.value) or \
                "(last error: connection closed)" in str(caught.value), str(caught.value)
        await asyncio.to_thread(broker.start)
        stored = await asyncio.wait_for(await producer.send(4, b"after"), 30)
        await producer.close()
        assert [e.value for e in await read_all(broker.address, "twice", 0)
                if e.offset == stored.offset] == [b"after"]

    try:
        asyncio.run(go())
    finally:
        broker.stop()


def test_retry_timeout_bounds_the_retrying(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()

    async def go() -> float:
        async with Admin(broker.address) as admin:
            await admin.create_topic("gone", 1)
        consumer = await Consumer.subscribe(broker.address, "gone", "s", retry_timeout_ms=1_500)
        broker.kill()
        began = time.monotonic()
        with pytest.raises(Unavailable, match=r"did not come back within 1.5 s "
                                              r"\(retry_timeout_ms=1500\)"):
            await consumer.receive(30)
        await consumer.close()
        return time.monotonic() - began

    try:
        assert asyncio.run(go()) < 10
    finally:
        broker.stop()


def test_a_follower_from_latest_resumes_where_it_stood(tmp_path: Path) -> None:
    """Events produced while a `latest` follower reconnects are not skipped."""
    broker = BrokerProcess(tmp_path / "data")
    broker.start()

    async def go() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("resume", 1)
        async with await Producer.create(broker.address, "resume") as producer:
            await producer.send(1, b"old")
            await producer.flush()
        reader = Reader(broker.address, "resume", 0, start="latest", follow=True,
                        retry_backoff_ms=3_000, retry_backoff_max_ms=3_000)
        first = asyncio.ensure_future(reader.__anext__())
        await _wait_for(lambda: reader.next_offset == 1, 20, "the follower's position")
        broker.kill()
        await asyncio.to_thread(broker.start)
        async with await Producer.create(broker.address, "resume") as producer:
            await producer.send(2, b"while away")  # before the reader's 3 s backoff ends
            await producer.flush()
        batch = await asyncio.wait_for(first, 30)
        assert list(batch.values) == [b"while away"]
        await reader.close()

    try:
        asyncio.run(go())
    finally:
        broker.stop()
