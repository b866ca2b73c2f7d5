"""`keybus demo`: the embedded broker plus a short tour of Key_Shared.

Starts the broker on its embedded default (./keybus-data, port 6650) and
writes orders keyed by customer. Three Key_Shared consumers (auto-split) join
one after another while orders flow, and one leaves: each is told when its
hash ranges change, every customer's orders reach one consumer at a time, in
offset order. The broker keeps serving until Ctrl-C (or --exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import uuid
from collections import Counter, defaultdict

import uvloop
from rich.console import Console

from broker.config import load_settings
from broker.server import start_broker
from keybus.cli import render_subscriptions
from keybus.cli.render import format_ranges, range_bar
from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.core.model import HashRange
from sdk.errors import AlreadyExists
from sdk.producer import Producer
from sdk.subscription_admin import SubscriptionAdmin

TOPIC = "demo-orders"
CUSTOMERS = 300
WAVE_ORDERS = 5_000
console = Console()


class Tour:
    """Consumers that record what they handle, in one global order."""

    def __init__(self, broker: str, subscription: str) -> None:
        self.broker = broker
        self.subscription = subscription
        self.sequence = itertools.count()
        self.handled: list[tuple[int, str, int, int, str]] = []  # seq, customer, partition, offset, name
        self.counts: Counter[str] = Counter()
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.consumers: dict[str, Consumer] = {}
        self.closing = False

    async def join(self, name: str) -> None:
        def ranges_changed(partition: int, ranges: list[HashRange]) -> None:
            if partition == 0 and not self.closing:
                console.print(f"  {name:<8} partition 0 now serves {range_bar(ranges, 32)} "
                              f"{format_ranges(ranges)}")

        consumer = await Consumer.subscribe(
            self.broker, TOPIC, self.subscription, type="key_shared", mode="auto_split",
            initial_position="earliest", consumer_name=name, on_range_change=ranges_changed)
        self.consumers[name] = consumer
        self.tasks[name] = asyncio.create_task(self._consume(name, consumer))

    async def _consume(self, name: str, consumer: Consumer) -> None:
        while True:
            batch = await consumer.receive_batch()
            for message in batch.messages():
                event = message.event
                self.handled.append((next(self.sequence), event.ordering_key, event.partition,
                                     event.offset, name))
            self.counts[name] += batch.count
            consumer.ack_batch(batch)

    async def leave(self, name: str) -> None:
        self.tasks.pop(name).cancel()
        await self.consumers.pop(name).close()

    async def drain(self, expected: int, timeout_s: float = 60) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                while len({(p, o) for _, _, p, o, _ in self.handled}) < expected:
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise RuntimeError(f"the demo's consumers did not get all {expected} orders "
                               f"within {timeout_s}s") from None
        for name in list(self.consumers):
            await self.consumers[name].flush_acks()

    def check_order(self) -> int:
        """Each customer's orders were handled in offset order; returns redeliveries."""
        last: dict[tuple[str, int], int] = defaultdict(lambda: -1)
        seen: set[tuple[int, int]] = set()
        redelivered = 0
        for _, customer, partition, offset, _ in sorted(self.handled):
            if (partition, offset) in seen:
                redelivered += 1
                continue
            assert offset > last[(customer, partition)], f"order of {customer} broken"
            last[(customer, partition)] = offset
            seen.add((partition, offset))
        return redelivered


async def produce_wave(producer: Producer, wave: int) -> None:
    for n in range(wave * WAVE_ORDERS, (wave + 1) * WAVE_ORDERS):
        customer = f"customer-{n % CUSTOMERS}"
        await producer.send(n, f'{{"order": {n}, "customer": "{customer}"}}'.encode(),
                            ordering_key=customer, source="orders")
    await producer.flush()


async def tour(broker: str) -> None:
    async with Admin(broker) as admin:
        with contextlib.suppress(AlreadyExists):
            await admin.create_topic(TOPIC, partitions=2)
        start = sum(p.end_offset - p.start_offset
                    for p in (await admin.describe_topic(TOPIC)).partitions)
    subscription = f"billing-{uuid.uuid4().hex[:6]}"
    tour = Tour(broker, subscription)
    console.print(f"[bold]Key_Shared[/] subscription {subscription} on {TOPIC} "
                  f"(ordering key = customer, {CUSTOMERS} customers, 2 partitions)")
    async with await Producer.create(broker, TOPIC) as producer:
        steps = [("join", "alice"), ("join", "bob"), ("join", "carol"), ("leave", "bob")]
        for wave, (action, name) in enumerate(steps):
            console.print(f"[cyan]{name} {'joins' if action == 'join' else 'leaves'}[/]")
            await (tour.join(name) if action == "join" else tour.leave(name))
            await produce_wave(producer, wave)
            console.print(f"  produced {WAVE_ORDERS:,} orders")
    await tour.drain(start + len(steps) * WAVE_ORDERS)
    redelivered = tour.check_order()
    async with SubscriptionAdmin(broker) as admin:
        info = await admin.describe_subscription(TOPIC, subscription)
    for table in render_subscriptions.describe(info):
        console.print(table)
    handled = ", ".join(f"{name} {n:,}" for name, n in sorted(tour.counts.items()))
    console.print(f"events handled: {handled} ({redelivered} redelivered). Every customer's "
                  "orders went to one consumer at a time, in offset order.")
    tour.closing = True
    for name in list(tour.consumers):
        await tour.leave(name)


async def main(data_dir: str, port: int, exit_after: bool) -> int:
    settings = load_settings(None, overrides={"data_dir": data_dir, "port": port})
    broker = await start_broker(settings)
    address = f"127.0.0.1:{broker.port}"
    console.print(f"[bold green]keybus broker[/] serving on {address}, data in {data_dir}")
    try:
        await tour(address)
        if exit_after:
            return 0
        console.print(f"\nthe broker keeps serving on {address}; try "
                      f"[bold]keybus subscriptions list {TOPIC}[/] or "
                      f"[bold]keybus consume {TOPIC} --subscription s --type key_shared[/]. "
                      "Ctrl-C stops it.")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        return 0
    finally:
        await broker.stop()


def run_demo(data_dir: str, port: int, exit_after: bool) -> int:
    try:
        return uvloop.run(main(data_dir, port, exit_after))
    except OSError as e:
        console.print(f"keybus: error: {e}")
        return 1
