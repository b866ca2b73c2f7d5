"""A consumer whose broker is back but refuses its reconnect says so.

Goal: consumer A on an Exclusive subscription loses its broker; when the
broker is back, consumer B has taken the subscription. A is not "lost": the
broker is up and refuses it for a reason A's user can act on. A says so once,
in the broker's words, keeps retrying (as Pulsar's client on ConsumerBusy),
and gets back in, and says so, once B closes. If instead the subscription was
deleted and made again with another type meanwhile, no retry can help: A
ends with the broker's error. Before, A said "lost the broker" and then
retried in silence for ever in both cases.
Method: a real broker process killed with SIGKILL and started again on the
same port and data directory. While it starts and B subscribes, A's event
loop is held (the test calls the blocking SDK on it), so B is first for sure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sdk import Consumer, Producer, SyncAdmin, SyncConsumer, errors
from tests.support.broker_process import BrokerProcess

# The broker is back and A's channel connects within about a second; refusals are
# retried every retry_backoff_max_ms (1 s here). On a loaded machine, a few s more.
TOLD_WITHIN_S = 15.0


async def _wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout_s} s")
        await asyncio.sleep(0.05)


async def _subscribe_a(broker: BrokerProcess, told: list[tuple[bool, str]]) -> Consumer:
    consumer = await Consumer.subscribe(
        broker.address, "t", "s", type="exclusive", consumer_name="a",
        retry_backoff_max_ms=1_000, on_connection_change=lambda up, text: told.append((up, text)))
    stream = consumer.stream
    assert stream is not None and await stream.confirm(10)
    broker.kill()
    await _wait_for(lambda: bool(told), TOLD_WITHIN_S, "report of the lost broker")
    assert told == [(False, f"lost the broker at {broker.address} (connection closed); "
                            "retrying")]
    return consumer


def _broker_with_topic(tmp_path: Path) -> BrokerProcess:
    """A started broker with topic "t" of one partition."""
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    admin = SyncAdmin(broker.address)
    admin.create_topic("t", 1)
    admin.close()
    return broker


def test_a_refused_reconnect_is_told_with_the_brokers_reason_until_it_is_taken(
        tmp_path: Path) -> None:
    broker = _broker_with_topic(tmp_path)
    told: list[tuple[bool, str]] = []

    async def go() -> None:
        consumer = await _subscribe_a(broker, told)
        broker.start()  # blocking calls: A's loop waits while B takes the subscription
        other = SyncConsumer.subscribe(broker.address, "t", "s", type="exclusive",
                                       consumer_name="b")
        try:
            await _wait_for(lambda: len(told) >= 2, TOLD_WITHIN_S, "report of the refusal")
            up, text = told[1]
            assert not up and text == (
                f"the broker at {broker.address} refuses the reconnect: subscription 's' on "
                "topic 't' is Exclusive and consumer 'b' is attached; a second consumer ('a') "
                "is refused. Use type shared, failover or key_shared for several consumers; "
                "retrying")
            await asyncio.sleep(2.5)  # two more refused attempts: told once only
            assert len(told) == 2
        finally:
            other.close()
        await _wait_for(lambda: len(told) >= 3, TOLD_WITHIN_S, "report of the way back in")
        up, text = told[2]
        assert up and text.startswith(f"the broker at {broker.address} accepts the reconnect "
                                      "after refusing it for ")
        async with await Producer.create(broker.address, "t") as producer:
            await producer.send(1, b"after")
            await producer.flush()
        assert (await consumer.receive(20)).value == b"after"
        await consumer.close()
        assert len(told) == 3

    try:
        asyncio.run(asyncio.wait_for(go(), 120))
    finally:
        broker.stop()


def test_a_subscription_made_again_with_another_type_ends_the_consumer(tmp_path: Path) -> None:
    broker = _broker_with_topic(tmp_path)
    told: list[tuple[bool, str]] = []

    async def go() -> None:
        consumer = await _subscribe_a(broker, told)
        broker.start()  # blocking, as above: the subscription is made again before A is back
        admin = SyncAdmin(broker.address)
        admin.delete_subscription("t", "s")
        admin.close()
        other = SyncConsumer.subscribe(broker.address, "t", "s", type="shared",
                                       consumer_name="b")
        try:
            with pytest.raises(errors.FailedPrecondition) as caught:
                await consumer.receive(TOLD_WITHIN_S)
            assert str(caught.value).startswith("subscription 's' on topic 't' is ")
            assert "consumer 'a' asked for " in str(caught.value)
            assert caught.value.broker_error == "subscription_type_mismatch"
            # nothing retried; the broker answered, so it is told back before the error
            assert [up for up, _ in told] == [False, True], told
            assert told[1][1].startswith(f"the broker at {broker.address} is back after "), told
        finally:
            other.close()
        await consumer.close()

    try:
        asyncio.run(asyncio.wait_for(go(), 120))
    finally:
        broker.stop()
