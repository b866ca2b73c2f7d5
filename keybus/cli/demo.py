"""`keybus demo`: the embedded broker plus a short tour of hash ranges.

Starts the broker on its embedded default (./keybus-data, port 6650), writes
orders for 200 customers, then reads the topic as four hash-range readers
(the split a Key_Shared subscription makes): each key lands in exactly one
range, in offset order. The broker keeps serving until Ctrl-C (or --exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections import defaultdict

import uvloop
from rich.console import Console
from rich.table import Table

from broker.config import load_settings
from broker.server import start_broker
from keybus.cli.render import format_ranges, range_bar
from sdk.admin import Admin
from sdk.core.hashing import slot_of
from sdk.core.model import equal_splits
from sdk.errors import AlreadyExists
from sdk.producer import Producer
from sdk.reader import Reader

TOPIC = "demo-orders"
CUSTOMERS = 200
ORDERS = 20_000
READERS = 4
console = Console()


async def produce_orders(broker: str) -> None:
    async with Admin(broker) as admin:
        with contextlib.suppress(AlreadyExists):
            await admin.create_topic(TOPIC, partitions=2)
    async with await Producer.create(broker, TOPIC) as producer:
        for n in range(ORDERS):
            customer = f"customer-{n % CUSTOMERS}"
            await producer.send(n, f'{{"order": {n}, "customer": "{customer}"}}'.encode(),
                                ordering_key=customer, source="orders")
        await producer.flush()
    console.print(f"produced {ORDERS:,} orders for {CUSTOMERS} customers to [bold]{TOPIC}[/] "
                  "(ordering key = customer, 2 partitions, fsync before ack)")


async def read_by_ranges(broker: str) -> None:
    table = Table("partition", "reader", "hash range", "slots 0..65535",
                  "events", "customers", title="four hash-range readers per partition")
    for partition in range(2):
        owners: dict[str, int] = {}
        for i, hash_range in enumerate(equal_splits(READERS)):
            last_offset: dict[str, int] = defaultdict(lambda: -1)
            events = 0
            async with Reader(broker, TOPIC, partition, hash_ranges=[hash_range]) as reader:
                async for batch in reader:
                    for event in batch.events():
                        customer = event.ordering_key
                        assert hash_range.contains(slot_of(customer))
                        assert event.offset > last_offset[customer], "per-key order broken"
                        assert owners.setdefault(customer, i) == i, "a key in two ranges"
                        last_offset[customer] = event.offset
                        events += 1
            table.add_row(str(partition), f"reader-{i}", format_ranges([hash_range]),
                          range_bar([hash_range], 16), f"{events:,}", str(len(last_offset)))
    console.print(table)
    console.print("every customer's orders went to exactly one range, in offset order.")


async def main(data_dir: str, port: int, exit_after: bool) -> int:
    settings = load_settings(None, overrides={"data_dir": data_dir, "port": port})
    broker = await start_broker(settings)
    address = f"127.0.0.1:{broker.port}"
    console.print(f"[bold green]keybus broker[/] serving on {address}, data in {data_dir}")
    try:
        await produce_orders(address)
        await read_by_ranges(address)
        if exit_after:
            return 0
        console.print(f"\nthe broker keeps serving on {address}; try "
                      f"[bold]keybus topics describe {TOPIC}[/] or "
                      f"[bold]keybus read {TOPIC} --ranges 0-16383 --max 5[/]. Ctrl-C stops it.")
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
