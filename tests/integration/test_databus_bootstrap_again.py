"""A consumer that bootstrapped and went online, then fell behind retention, bootstraps again.

Goal: with `bootstrap=True`, a partition that finished a bootstrap follows the
live log; if retention then removes the log ahead of its reader (the
consumer was slow, or the broker was down long enough), the registration
starts a new bootstrap (on_start_bootstrap again) and ends in the state of
the whole history, instead of stopping with OffsetOutOfRange. A probe found
it stopping so: a slow consumer over a broker killed and restarted gave up
with "start offset N was removed by retention" after its first bootstrap.
Method: one broker process (retention checked every 50 ms, view folded
every 50 ms); the consumer's event callback waits on a gate while more than
retention keeps is produced, and the log start moves past its position.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path

from sdk import DELETE, Admin, Producer
from sdk.databus import DatabusClient, DatabusCombinedConsumerBase, DbusEvent
from sdk.databus.config import DatabusConfig
from sdk.stores.file_checkpoints import FileCheckpointStore
from tests.support.bootstrap_model import (
    History,
    describe_partition,
    plan_events,
    produce_events,
)
from tests.support.broker_process import BrokerProcess

TOPIC = "again-db"
# A small read-ahead, so that the reader is stopped near the consumer's position.
CONFIG = DatabusConfig(prefetch_windows_max=1, reader_bytes_max=4_096)
# Events of 1 kB produced past the held consumer: more than gRPC holds in flight
# (the reader had received about 7,000 of them).
PAST = 20_000


class GatedConsumer(DatabusCombinedConsumerBase):
    """Applies every event to a dict; online events wait while the gate is shut."""

    def __init__(self) -> None:
        self.state: dict[tuple[str, int | str], bytes] = {}
        self.calls: Counter[str] = Counter()
        self.errors: list[Exception] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting_at = -1  # offset of the event waiting at the shut gate

    def _apply(self, event: DbusEvent) -> None:
        if event.opcode == DELETE:
            self.state.pop((event.source, event.key), None)
        else:
            self.state[(event.source, event.key)] = event.value

    async def on_event(self, event: DbusEvent) -> None:
        if not self.gate.is_set():
            self.waiting_at = event.offset
            await self.gate.wait()
        self._apply(event)

    def on_bootstrap_event(self, event: DbusEvent) -> None:
        self._apply(event)

    def on_start_bootstrap(self) -> None:
        self.calls["start_bootstrap"] += 1

    def on_end_bootstrap(self) -> None:
        self.calls["end_bootstrap"] += 1

    def on_error(self, error: Exception) -> None:
        self.errors.append(error)


def _padded(events: list[tuple[str, int, bytes, int]]) -> list[tuple[str, int, bytes, int]]:
    """Values of 1 kB (deletes stay empty): what the reader may hold in flight is
    far less than what is produced past it."""
    return [(s, k, v.ljust(1_000, b".") if v else v, op) for s, k, v, op in events]


async def _until(condition: object, what: str, consumer: GatedConsumer,
                 timeout_s: float = 90) -> None:
    """Poll `condition()`; fail at the deadline, or at once if consumption ended."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():  # type: ignore[operator]
        assert not consumer.errors, f"waiting for {what}: {consumer.errors!r}"
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def _pass_the_held_consumer(broker: str, producer: Producer, rng: random.Random,
                                  history: History, consumer: GatedConsumer
                                  ) -> tuple[int, int]:
    """Hold an online event at the shut gate, then produce until retention removed
    more than PAST events past it; returns (held offset, the log's start)."""
    await produce_events(producer, plan_events(rng, 5, 1, 0.0, "b"), history, chunk=1)
    await _until(lambda: consumer.waiting_at >= 0, "an online event", consumer)
    held_at = consumer.waiting_at
    start = 0
    for round_ in range(60):  # bounded: far more than retention keeps
        await produce_events(producer, _padded(plan_events(rng, 200, 1, 0.1, f"c{round_}")),
                             history, chunk=100)
        start = (await describe_partition(broker, TOPIC)).start_offset
        if start > held_at + PAST:
            return held_at, start
    # Retention trims only what the view folded, and the view's thread runs at a low
    # CPU priority: on a busy machine it may still be catching up. Bounded.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while start <= held_at + PAST and loop.time() < deadline:
        await asyncio.sleep(0.2)
        start = (await describe_partition(broker, TOPIC)).start_offset
    assert start > held_at + PAST, f"retention never passed the held consumer ({start})"
    return held_at, start


async def _scenario(broker: str, root: Path) -> tuple[GatedConsumer, History, int, int]:
    history = History()
    async with Admin(broker) as admin:
        await admin.create_topic(TOPIC, retention_bytes=60_000)
    rng = random.Random(11)
    async with await Producer.create(broker, TOPIC) as producer:
        await produce_events(producer, plan_events(rng, 200, 1, 0.1, "a"), history, chunk=100)
        consumer = GatedConsumer()
        client = DatabusClient(broker, checkpoint_store=FileCheckpointStore(root / "ck"),
                               config=CONFIG)
        client.register(consumer, topic=TOPIC, name="again", start="bootstrap", bootstrap=True)
        async with client:
            await _until(lambda: consumer.calls["end_bootstrap"] == 1
                         and consumer.state == history.model, "the first bootstrap", consumer)
            consumer.gate.clear()  # the next online event waits
            try:
                held_at, start = await _pass_the_held_consumer(broker, producer, rng,
                                                               history, consumer)
            finally:  # a failure above must not leave the callback (and the client's stop) held
                consumer.gate.set()
            await _until(lambda: consumer.state == history.model, "the state", consumer)
            await produce_events(producer, plan_events(rng, 50, 1, 0.1, "d"), history)
            await _until(lambda: consumer.state == history.model, "online again", consumer)
    return consumer, history, held_at, start


def test_an_online_consumer_behind_retention_bootstraps_again(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", "--retention-check-interval-ms", "50",
                           "--view-linger-ms", "50")
    broker.start()
    try:
        consumer, history, held_at, start = asyncio.run(_scenario(broker.address, tmp_path))
    finally:
        broker.stop()
    assert consumer.errors == []
    assert consumer.state == history.model
    assert consumer.calls["start_bootstrap"] == consumer.calls["end_bootstrap"] == 2, (
        consumer.calls, held_at, start)
