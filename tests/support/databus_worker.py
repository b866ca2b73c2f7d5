"""A Databus consumer process for integration tests: logs every callback to a file.

    python -m tests.support.databus_worker BROKER TOPIC LOG [--checkpoints DIR | --broker-checkpoints]
        [--shared SUBSCRIPTION] [--event-sleep-ms N] [--checkpoint-windows N]

Each line is written with one os.write (unbuffered), so a SIGKILL leaves
every line of the calls made before it. Lines: `S pid` (on_start_consumption),
`W partition scn` (on_start_window), `E partition scn offset key`, `X partition
scn` (on_end_window), `C partition scn` (on_checkpoint), `R partition scn`
(on_rollback), `Q` (on_stop_consumption). SIGTERM stops the client cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time

from sdk.databus import DatabusClient, DatabusConfig, DatabusConsumerBase, DbusEvent, Scn
from sdk.stores import BrokerCheckpointStore, CheckpointStore, FileCheckpointStore


class LoggingConsumer(DatabusConsumerBase):
    def __init__(self, fd: int, event_sleep_s: float) -> None:
        self.fd = fd
        self.event_sleep_s = event_sleep_s

    def _line(self, text: str) -> None:
        os.write(self.fd, (text + "\n").encode())

    def on_start_consumption(self) -> None:
        self._line(f"S {os.getpid()}")

    def on_start_window(self, scn: Scn) -> None:
        self._line(f"W {scn.partition} {int(scn)}")

    def on_event(self, event: DbusEvent) -> None:
        if self.event_sleep_s:
            time.sleep(self.event_sleep_s)
        self._line(f"E {event.partition} {event.scn} {event.offset} {event.key}")

    def on_end_window(self, scn: Scn) -> None:
        self._line(f"X {scn.partition} {int(scn)}")

    def on_checkpoint(self, scn: Scn) -> None:
        self._line(f"C {scn.partition} {int(scn)}")

    def on_rollback(self, scn: Scn) -> None:
        self._line(f"R {scn.partition} {int(scn)}")

    def on_stop_consumption(self) -> None:
        self._line("Q")


async def main(options: argparse.Namespace) -> None:
    fd = os.open(options.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    consumer = LoggingConsumer(fd, options.event_sleep_ms / 1000)
    config = DatabusConfig(checkpoint_windows_n=options.checkpoint_windows)
    store: CheckpointStore | None = None
    if options.broker_checkpoints:
        store = BrokerCheckpointStore(options.broker)
    elif options.checkpoints:
        store = FileCheckpointStore(options.checkpoints)
    client = DatabusClient(options.broker, checkpoint_store=store, config=config)
    if options.shared:
        client.register_shared(consumer, topic=options.topic, subscription=options.shared)
    else:
        client.register(consumer, topic=options.topic, name="worker")
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    await client.start()
    waiting = asyncio.ensure_future(client.wait())
    await asyncio.wait({waiting, asyncio.ensure_future(stopping.wait())},
                       return_when=asyncio.FIRST_COMPLETED)
    await client.stop()
    os.close(fd)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("broker")
    parser.add_argument("topic")
    parser.add_argument("log")
    parser.add_argument("--checkpoints")
    parser.add_argument("--broker-checkpoints", action="store_true")
    parser.add_argument("--shared")
    parser.add_argument("--event-sleep-ms", type=float, default=0.0)
    parser.add_argument("--checkpoint-windows", type=int, default=1)
    asyncio.run(main(parser.parse_args()))
