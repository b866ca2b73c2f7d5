"""A frozen consumer's events go to the other consumers within seconds.

Goal: a consumer that stops answering but keeps its TCP connection open
(SIGSTOP here; a hung process or a host gone without a reset alike) is
dropped by the broker's keepalive (client_keepalive_time_ms +
client_keepalive_timeout_ms, broker/keepalive.py): its Subscribe stream
ends, and the events it held unacknowledged go to the other consumer of the
Key_Shared subscription, in order per key, within about keepalive time +
timeout. No ack timeout is configured: without the broker's pings those
events stay with the frozen consumer for gRPC's default 2 hours. The broker
logs one line naming the consumer.
Method: a real broker process with 1 s / 1 s client keepalive; the frozen
consumer is a `keybus consume --no-ack --json` child (SIGSTOPped, always
resumed and killed in finally), the healthy one runs in the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sdk import Admin, Consumer, Producer
from sdk.subscription_admin import SubscriptionAdmin
from tests.support.broker_process import REPO, BrokerProcess

KEEPALIVE_MS = 1_000
# The broker pings after KEEPALIVE_MS of silence and gives up KEEPALIVE_MS later;
# then the detach and the redelivery, plus slack for a busy machine.
HANDED_OVER_WITHIN_S = 2 * KEEPALIVE_MS / 1000 + 8
TOPIC, SUBSCRIPTION = "frozen-consumer", "s"
KEYS = 20


async def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        await asyncio.sleep(0.05)


def _printed(out: Path) -> list[tuple[int, int]]:
    """(key, offset) of each event the child printed (complete lines only)."""
    text = out.read_text()
    lines = text.splitlines()[:text.count("\n")]
    events = [json.loads(line) for line in lines if line.strip()]
    return [(int(e["key"]), int(e["offset"])) for e in events if "offset" in e]


async def _consumers(address: str) -> int:
    async with SubscriptionAdmin(address) as admin:
        info = await admin.describe_subscription(TOPIC, SUBSCRIPTION)
    return len(info.partitions[0].consumers)


async def _produce(address: str, first: int, count: int) -> None:
    async with await Producer.create(address, TOPIC) as producer:
        sent = [await producer.send(i % KEYS, b"v%d" % i) for i in range(first, first + count)]
        await asyncio.gather(*sent)


def test_frozen_consumers_events_go_to_the_other_consumer(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", "--client-keepalive-time-ms", str(KEEPALIVE_MS),
                           "--client-keepalive-timeout-ms", str(KEEPALIVE_MS))
    broker.start()
    out = tmp_path / "frozen.jsonl"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child: subprocess.Popen[bytes] | None = None

    async def go() -> None:
        nonlocal child
        async with Admin(broker.address) as admin:
            await admin.create_topic(TOPIC, 1)
        healthy = await Consumer.subscribe(broker.address, TOPIC, SUBSCRIPTION,
                                           type="key_shared", consumer_name="healthy")
        received: list[tuple[int, int]] = []

        async def take() -> None:
            while True:
                batch = await healthy.receive_batch()
                received.extend((int(k), o) for k, o in zip(batch.keys(), batch.offsets, strict=True))
                healthy.ack_batch(batch)

        taking = asyncio.get_running_loop().create_task(take())
        with open(out, "wb") as stdout, open(tmp_path / "frozen.log", "wb") as stderr:
            child = subprocess.Popen(
                [sys.executable, "-m", "keybus", "consume", TOPIC, "-s", SUBSCRIPTION,
                 "--type", "key_shared", "--name", "frozen", "--no-ack", "--json",
                 "--broker", broker.address], stdout=stdout, stderr=stderr, env=env, cwd=REPO)
        deadline = time.monotonic() + 20
        while await _consumers(broker.address) < 2:
            assert child.poll() is None, (tmp_path / "frozen.log").read_text()
            assert time.monotonic() < deadline, "the child consumer never attached"
            await asyncio.sleep(0.1)
        await _produce(broker.address, 0, 200)
        await _wait_for(lambda: len(_printed(out)) + len(received) == 200, 20,
                        "the 200 events shared between the two consumers")
        frozen_held = _printed(out)
        assert frozen_held and received, "both consumers own keys"
        child.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        await _produce(broker.address, 200, 100)  # some for the frozen one's keys, too
        await _wait_for(lambda: {offset for _, offset in received} >= set(range(300)),
                        HANDED_OVER_WITHIN_S - (time.monotonic() - frozen_at),
                        "the frozen consumer's events at the healthy one")
        assert time.monotonic() - frozen_at < HANDED_OVER_WITHIN_S
        assert set(frozen_held) <= set(received)
        for key in range(KEYS):  # per key: the frozen one's events first, then the rest
            offsets = [offset for k, offset in received if k == key]
            assert offsets == sorted(set(offsets)), f"key {key}: {offsets}"
        taking.cancel()
        await healthy.close()

    try:
        asyncio.run(go())
        assert "consumer 'frozen' of subscription 's' on topic 'frozen-consumer' is gone" \
            in broker.log_path.read_text()
    finally:
        if child is not None:
            child.send_signal(signal.SIGCONT)
            child.kill()
            child.wait(10)
        broker.stop()
