"""A frozen consumer's events go to the other consumers within seconds.

Goal: a consumer that stops answering but keeps its TCP connection open
(SIGSTOP here; a hung process or a host gone without a reset alike) is
dropped by the broker's keepalive (client_keepalive_time_ms +
client_keepalive_timeout_ms, broker/keepalive.py): its Subscribe stream
ends and the events it held unacknowledged go on, within about keepalive
time + timeout, for every subscription type:
- Key_Shared: to the other consumer, in order per key;
- Shared: to the other consumer, nothing lost;
- Failover: to the standby, which becomes active and gets every event from
  the frozen one's unacknowledged point on, in order;
- Exclusive: a second consumer is refused while the frozen one's stream is
  open; once the broker closed it, a new consumer attaches (retrying) and
  gets every unacknowledged event, in order.
No ack timeout is configured: without the broker's pings those events stay
with the frozen consumer for gRPC's default 2 hours. The broker logs one
line naming the consumer.
Method: a real broker process with 1 s / 1 s client keepalive; the frozen
consumer is a `keybus consume --no-ack --json` child (SIGSTOPped, always
resumed and killed in finally), the other one runs in the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from sdk import Admin, Consumer, Producer
from sdk.errors import FailedPrecondition, NotFound
from sdk.subscription_admin import SubscriptionAdmin
from tests.support.broker_process import REPO, BrokerProcess

KEEPALIVE_MS = 1_000
# The broker pings after KEEPALIVE_MS of silence and gives up KEEPALIVE_MS later;
# then the detach and the redelivery, plus slack for a busy machine.
HANDED_OVER_WITHIN_S = 2 * KEEPALIVE_MS / 1000 + 8
TOPIC, SUBSCRIPTION = "frozen-consumer", "s"
KEYS = 20
ACKED_FIRST = 50  # Failover / Exclusive: acknowledged before the child attaches
GONE_LINE = "consumer 'frozen' of subscription 's' on topic 'frozen-consumer' is gone"


async def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        await asyncio.sleep(0.05)


async def _consumers(address: str) -> int:
    """The subscription's consumers (0 before its first consumer created it)."""
    async with SubscriptionAdmin(address) as admin:
        try:
            info = await admin.describe_subscription(TOPIC, SUBSCRIPTION)
        except NotFound:
            return 0
    return len(info.partitions[0].consumers)


async def _produce(address: str, first: int, count: int) -> None:
    async with await Producer.create(address, TOPIC) as producer:
        sent = [await producer.send(i % KEYS, b"v%d" % i) for i in range(first, first + count)]
        await asyncio.gather(*sent)


async def _acked(address: str, received: list[tuple[int, int]], first: int,
                 count: int) -> None:
    """Produce `count` events and wait until the consumer taking into `received` got and
    acknowledged them (the subscription's mark-delete is past them)."""
    await _produce(address, first, count)
    await _wait_for(lambda: len(received) == first + count, 20, f"the first {count} events")
    deadline = time.monotonic() + 20
    while True:
        async with SubscriptionAdmin(address) as admin:
            info = await admin.describe_subscription(TOPIC, SUBSCRIPTION)
        if info.partitions[0].mark_delete >= first + count:
            return
        assert time.monotonic() < deadline, "the acks never reached the broker"
        await asyncio.sleep(0.05)


def _take(consumer: Consumer, received: list[tuple[int, int]]) -> asyncio.Task[None]:
    """Receive and acknowledge in the background, appending (key, offset) to `received`."""
    async def take() -> None:
        while True:
            batch = await consumer.receive_batch()
            received.extend((int(k), o) for k, o in zip(batch.keys(), batch.offsets, strict=True))
            consumer.ack_batch(batch)
    return asyncio.get_running_loop().create_task(take())


class FrozenChild:
    """The consumer to freeze: a `keybus consume --no-ack --json` process named 'frozen'."""

    def __init__(self, tmp_path: Path) -> None:
        self.out = tmp_path / "frozen.jsonl"
        self.log = tmp_path / "frozen.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.frozen_at = 0.0

    async def start(self, address: str, sub_type: str, consumers: int) -> None:
        """Start it and wait until the subscription has `consumers` consumers with it."""
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.out, "wb") as stdout, open(self.log, "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "keybus", "consume", TOPIC, "-s", SUBSCRIPTION,
                 "--type", sub_type, "--name", "frozen", "--no-ack", "--json",
                 "--broker", address], stdout=stdout, stderr=stderr, env=env, cwd=REPO)
        deadline = time.monotonic() + 20
        while await _consumers(address) < consumers:
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "the child consumer never attached"
            await asyncio.sleep(0.1)

    def printed(self) -> list[tuple[int, int]]:
        """(key, offset) of each event it printed (complete lines only)."""
        text = self.out.read_text()
        lines = text.splitlines()[:text.count("\n")]
        events = [json.loads(line) for line in lines if line.strip()]
        return [(int(e["key"]), int(e["offset"])) for e in events if "offset" in e]

    def freeze(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.frozen_at = time.monotonic()

    def left_s(self) -> float:
        """What is left of the hand-over bound since it was frozen."""
        return HANDED_OVER_WITHIN_S - (time.monotonic() - self.frozen_at)

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(10)


def _run(tmp_path: Path, go: Callable[[str, FrozenChild], Coroutine[Any, Any, None]]) -> None:
    """Run `go` against a broker pinging its clients every second, then check its log line."""
    broker = BrokerProcess(tmp_path / "data", "--client-keepalive-time-ms", str(KEEPALIVE_MS),
                           "--client-keepalive-timeout-ms", str(KEEPALIVE_MS))
    broker.start()
    child = FrozenChild(tmp_path)
    try:
        asyncio.run(go(broker.address, child))
        assert GONE_LINE in broker.log_path.read_text()
    finally:
        child.stop()
        broker.stop()


@pytest.mark.parametrize("sub_type", ["key_shared", "shared"])
def test_frozen_consumers_events_go_to_the_other_consumer(tmp_path: Path, sub_type: str) -> None:
    async def go(address: str, child: FrozenChild) -> None:
        async with Admin(address) as admin:
            await admin.create_topic(TOPIC, 1)
        healthy = await Consumer.subscribe(address, TOPIC, SUBSCRIPTION,
                                           type=sub_type, consumer_name="healthy")
        received: list[tuple[int, int]] = []
        taking = _take(healthy, received)
        await child.start(address, sub_type, 2)
        await _produce(address, 0, 200)
        await _wait_for(lambda: len(child.printed()) + len(received) == 200, 20,
                        "the 200 events shared between the two consumers")
        frozen_held = child.printed()
        assert frozen_held and received, "both consumers get events"
        child.freeze()
        await _produce(address, 200, 100)  # some for the frozen one's keys, too
        await _wait_for(lambda: {offset for _, offset in received} >= set(range(300)),
                        child.left_s(), "the frozen consumer's events at the healthy one")
        assert child.left_s() > 0
        assert set(frozen_held) <= set(received)
        if sub_type == "key_shared":  # per key: the frozen one's events first, then the rest
            for key in range(KEYS):
                offsets = [offset for k, offset in received if k == key]
                assert offsets == sorted(set(offsets)), f"key {key}: {offsets}"
        taking.cancel()
        await healthy.close()

    _run(tmp_path, go)


def test_frozen_failover_consumer_is_replaced_by_the_standby(tmp_path: Path) -> None:
    async def go(address: str, child: FrozenChild) -> None:
        async with Admin(address) as admin:
            await admin.create_topic(TOPIC, 1)
        standby = await Consumer.subscribe(address, TOPIC, SUBSCRIPTION,
                                           type="failover", consumer_name="standby")
        received: list[tuple[int, int]] = []
        taking = _take(standby, received)
        await _acked(address, received, 0, ACKED_FIRST)  # the unacked point: ACKED_FIRST
        await child.start(address, "failover", 2)  # "frozen" sorts first: it becomes active
        await _produce(address, ACKED_FIRST, 200)
        await _wait_for(lambda: len(child.printed()) == 200, 20, "the 200 events at the child")
        assert len(received) == ACKED_FIRST, "the standby got nothing while inactive"
        child.freeze()
        await _produce(address, ACKED_FIRST + 200, 100)
        end = ACKED_FIRST + 300
        await _wait_for(lambda: len(received) >= end, child.left_s(),
                        "the frozen consumer's events at the standby")
        assert child.left_s() > 0
        assert [offset for _, offset in received] == list(range(end))
        taking.cancel()
        await standby.close()

    _run(tmp_path, go)


def test_frozen_exclusive_consumer_gives_way_once_closed(tmp_path: Path) -> None:
    async def go(address: str, child: FrozenChild) -> None:
        async with Admin(address) as admin:
            await admin.create_topic(TOPIC, 1)
        first = await Consumer.subscribe(address, TOPIC, SUBSCRIPTION, type="exclusive",
                                         consumer_name="first")
        taken: list[tuple[int, int]] = []
        taking = _take(first, taken)
        await _acked(address, taken, 0, ACKED_FIRST)  # the unacked point: ACKED_FIRST
        taking.cancel()
        await first.close()
        await child.start(address, "exclusive", 1)
        await _produce(address, ACKED_FIRST, 200)
        await _wait_for(lambda: len(child.printed()) == 200, 20, "the 200 events at the child")
        child.freeze()
        await _produce(address, ACKED_FIRST + 200, 100)
        with pytest.raises(FailedPrecondition, match="is Exclusive and consumer 'frozen'"):
            await Consumer.subscribe(address, TOPIC, SUBSCRIPTION, type="exclusive",
                                     consumer_name="next")
        refusals = 1
        while True:  # bounded by the hand-over time
            assert child.left_s() > 0, f"still refused after {refusals} tries"
            try:
                after = await Consumer.subscribe(address, TOPIC, SUBSCRIPTION,
                                                 type="exclusive", consumer_name="next")
                break
            except FailedPrecondition:
                refusals += 1
                await asyncio.sleep(0.2)
        received: list[tuple[int, int]] = []
        taking = _take(after, received)
        end = ACKED_FIRST + 300
        await _wait_for(lambda: len(received) >= end - ACKED_FIRST, child.left_s(),
                        "the unacknowledged events at the new consumer")
        assert [offset for _, offset in received] == list(range(ACKED_FIRST, end))
        taking.cancel()
        await after.close()

    _run(tmp_path, go)
