"""`keybus demo`: the embedded broker plus a short tour of Key_Shared.

Starts the broker on its embedded default (./keybus-data, port 6650; both
can be chosen) and writes orders keyed by customer to a topic of two
partitions. Three Key_Shared consumers (auto-split) join one after another
while orders flow, and one leaves: each is told when its hash ranges change
on each partition, every customer's orders reach one consumer at a time, in
offset order. The broker keeps serving until Ctrl-C (or --exit), with the two
remaining consumers attached so `keybus subscriptions describe` draws them.

Run twice, it tells the same story: the subscription `demo-billing` keeps
its cursor between runs, so a run handles the orders it produced (and any a
run stopped half-way left unacknowledged), not the earlier runs' ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import sys
from collections import Counter, defaultdict
from typing import Any

import click
import uvloop
from rich.console import Console

from broker.config import ConfigError, load_settings
from broker.server import Broker, DataDirInUse, PortInUse, StartError, start_broker
from keybus.cli import render_subscriptions
from keybus.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, json_option, print_json
from keybus.cli.render import format_ranges, range_bar
from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.core.model import HashRange
from sdk.errors import AlreadyExists
from sdk.producer import Producer

TOPIC = "demo-orders"
SUBSCRIPTION = "demo-billing"
PARTITIONS = 2
CUSTOMERS = 300
WAVE_ORDERS = 5_000
STEPS = (("join", "alice"), ("join", "bob"), ("join", "carol"), ("leave", "bob"))


class Narrator:
    """Tells the tour: rich text for people, one JSON object per line with --json."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.console = Console()

    def say(self, kind: str, text: str, **fields: Any) -> None:
        if self.as_json:
            print_json({"event": kind, **fields})
        else:
            self.console.print(text)

    def bar_width(self) -> int:
        return max(16, min(64, self.console.width - 40))


class Tour:
    """Consumers that record what they handle, in one global order."""

    def __init__(self, broker: str, narrator: Narrator) -> None:
        self.broker = broker
        self.narrator = narrator
        self.sequence = itertools.count()
        self.handled: list[tuple[int, str, int, int, str]] = []  # seq, customer, partition, offset, name
        self.counts: Counter[str] = Counter()
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.consumers: dict[str, Consumer] = {}
        self.touring = True

    async def join(self, name: str) -> None:
        def ranges_changed(partition: int, ranges: list[HashRange]) -> None:
            if self.touring:
                bar = range_bar(ranges, self.narrator.bar_width())
                self.narrator.say("range_change", f"  {name:<6} p{partition} {bar} "
                                  f"{format_ranges(ranges)}", consumer=name,
                                  partition=partition, ranges=format_ranges(ranges))

        consumer = await Consumer.subscribe(
            self.broker, TOPIC, SUBSCRIPTION, type="key_shared", mode="auto_split",
            start="latest", consumer_name=name, on_range_change=ranges_changed)
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
            if not self.touring:
                self.narrator.say("handled", f"{name} handled {batch.count} event(s) of "
                                  f"{TOPIC}/{batch.partition}", consumer=name,
                                  partition=batch.partition, events=batch.count)

    async def leave(self, name: str) -> None:
        self.tasks.pop(name).cancel()
        await self.consumers.pop(name).close()

    async def drain(self, admin: Admin, timeout_s: float = 60) -> None:
        """Wait until the subscription has nothing left to acknowledge."""
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    for consumer in self.consumers.values():
                        await consumer.flush_acks()
                    info = await admin.describe_subscription(TOPIC, SUBSCRIPTION)
                    if sum(p.backlog for p in info.partitions) == 0:
                        return
                    await asyncio.sleep(0.1)
        except TimeoutError:
            raise RuntimeError(f"the demo's consumers did not handle every order within "
                               f"{timeout_s:g} s") from None

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


async def produce_wave(producer: Producer, wave: int, first_order: int) -> None:
    for n in range(first_order + wave * WAVE_ORDERS, first_order + (wave + 1) * WAVE_ORDERS):
        customer = f"customer-{n % CUSTOMERS}"
        await producer.send(n, f'{{"order": {n}, "customer": "{customer}"}}'.encode(),
                            ordering_key=customer, source="orders")
    await producer.flush()


async def tour(broker: str, narrator: Narrator) -> Tour:
    """Join, produce, leave; then check order and show the subscription."""
    async with Admin(broker) as admin:
        with contextlib.suppress(AlreadyExists):
            await admin.create_topic(TOPIC, partitions=PARTITIONS)
        first_order = sum(p.end_offset for p in (await admin.describe_topic(TOPIC)).partitions)
        the_tour = Tour(broker, narrator)
        narrator.say("start", f"[bold]Key_Shared[/] subscription {SUBSCRIPTION} on {TOPIC} "
                     f"(ordering key = customer, {CUSTOMERS} customers, {PARTITIONS} "
                     "partitions); each consumer is told its hash ranges on each partition:",
                     topic=TOPIC, subscription=SUBSCRIPTION, partitions=PARTITIONS)
        async with await Producer.create(broker, TOPIC) as producer:
            for wave, (action, name) in enumerate(STEPS):
                narrator.say(action, f"[cyan]{name} {'joins' if action == 'join' else 'leaves'}[/]",
                             consumer=name)
                await (the_tour.join(name) if action == "join" else the_tour.leave(name))
                await produce_wave(producer, wave, first_order)
                narrator.say("produced", f"  produced {WAVE_ORDERS:,} orders", events=WAVE_ORDERS)
        await the_tour.drain(admin)
        the_tour.touring = False
        redelivered = the_tour.check_order()
        info = await admin.describe_subscription(TOPIC, SUBSCRIPTION)
    if not narrator.as_json:
        for renderable in render_subscriptions.describe(info, narrator.console.width):
            narrator.console.print(renderable)
    handled = ", ".join(f"{name} {n:,}" for name, n in sorted(the_tour.counts.items()))
    narrator.say("summary", f"events handled: {handled} ({redelivered} redelivered). Every "
                 "customer's orders went to one consumer at a time, in offset order.",
                 handled=dict(the_tour.counts), redelivered=redelivered)
    return the_tour


async def main(data_dir: str, port: int, exit_after: bool, narrator: Narrator) -> int:
    settings = load_settings(None, overrides={"data_dir": data_dir, "port": port})
    broker = await start_broker(settings)
    address = f"127.0.0.1:{broker.port}"
    narrator.say("serving", f"[bold green]keybus broker[/] serving on {address}, data in "
                 f"{data_dir}", broker=address, data_dir=data_dir)
    the_tour: Tour | None = None
    try:
        the_tour = await tour(address, narrator)
        if not exit_after:
            await _serve_until_stopped(broker, address, narrator)
        return 0
    finally:
        if the_tour is not None:
            for name in list(the_tour.consumers):
                await the_tour.leave(name)
        await broker.stop()


async def _serve_until_stopped(broker: Broker, address: str, narrator: Narrator) -> None:
    flag = "" if broker.port == 6650 else f" --broker {address}"
    narrator.say("waiting", f"\nthe broker keeps serving on {address} with alice and carol "
                 f"attached; try [bold]keybus subscriptions describe {TOPIC} {SUBSCRIPTION}"
                 f"{flag}[/] or [bold]keybus produce {TOPIC} --key 7 --value hi{flag}[/]. "
                 "Ctrl-C stops it.", broker=address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    narrator.say("stopping", "stopping the broker", broker=address)


@click.command(short_help="Start the embedded broker and tour Key_Shared.")
@click.option("--data-dir", default="./keybus-data", show_default=True, envvar="KEYBUS_DATA_DIR",
              show_envvar=True, help="Where the embedded broker keeps its log.")
@click.option("--port", default=6650, show_default=True, type=click.IntRange(0, 65535),
              envvar="KEYBUS_PORT", show_envvar=True,
              help="The embedded broker's port (0 = any free port).")
@click.option("--exit", "exit_after", is_flag=True, help="Stop the broker after the tour.")
@json_option
def demo(data_dir: str, port: int, exit_after: bool, as_json: bool) -> None:
    """Start the embedded broker and show Key_Shared hash ranges at work."""
    narrator = Narrator(as_json)
    try:
        sys.exit(uvloop.run(main(data_dir, port, exit_after, narrator)))
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    except StartError as e:
        hint = (" (with make: make run PORT=6651)" if isinstance(e, PortInUse) else
                " (with make: make run DATA_DIR=...)" if isinstance(e, DataDirInUse) else "")
        click.echo(f"keybus: error: {e}{hint}", err=True)
        sys.exit(EXIT_FAILED)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
