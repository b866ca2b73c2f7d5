"""`python -m benchmarks restart`: how soon clients carry on after their broker restarts.

A broker is killed with SIGKILL and started again on the same port and data
directory, `--rounds` times. Beside it run a producer (one event every 2 ms,
not awaited), a Key_Shared consumer and a following TopicReader. For each
round it times, from the moment the restarted broker serves (its ready file):
the first produce answer, the first delivery of an event sent after the
restart, and the first batch read.

Two client behaviours alternate, a round each:
- `wait for the channel` (the SDK's): a retry's delay ends when the client's
  channel connects again (sdk.channel.retry_wait), gRPC reconnecting at most
  1 s apart;
- `sleep the delay` (what the SDK did before): each retry sleeps its whole
  backoff, gRPC reconnecting at most 2 s apart. Made by patching the clients'
  `retry_wait` and the channel option in this process.

Prints a markdown table; nothing is written to RESULTS.md (copy it with its
command).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc.aio

import sdk.channel
import sdk.consumer
import sdk.retrying_call
import sdk.sender
from benchmarks import machine
from benchmarks.measurement import percentile
from sdk import Admin, Consumer, Producer, TopicReader
from tests.support.broker_process import BrokerProcess

MODES = ("wait for the channel", "sleep the delay")
SEND_EVERY_S = 0.002


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks restart", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="restarts in all (even: "
                        "the two behaviours alternate)")
    parser.add_argument("--down-s", type=float, default=0.5,
                        help="seconds between the kill and the restart")
    parser.add_argument("--no-record", action="store_true", help="(nothing is recorded)")
    return parser.parse_args(argv)


async def _sleep_the_delay(channel: grpc.aio.Channel | None, delay_ms: int) -> None:
    await asyncio.sleep(delay_ms / 1000)


@contextlib.contextmanager
def behaviour(mode: str) -> Iterator[None]:
    """The clients' retries as `mode` says, for clients made inside."""
    if mode == MODES[0]:
        yield
        return
    options = list(sdk.channel.CHANNEL_OPTIONS)
    sdk.channel.CHANNEL_OPTIONS[:] = [
        (k, 2_000 if k == "grpc.max_reconnect_backoff_ms" else v) for k, v in options]
    modules = (sdk.sender, sdk.consumer, sdk.retrying_call)
    for module in modules:
        module.retry_wait = _sleep_the_delay  # type: ignore[attr-defined]
    try:
        yield
    finally:
        sdk.channel.CHANNEL_OPTIONS[:] = options
        for module in modules:
            module.retry_wait = sdk.channel.retry_wait  # type: ignore[attr-defined]


async def _first(stamps: list[float], after: float, timeout_s: float = 60) -> float:
    """Seconds from `after` to the first stamp past it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        later = [t for t in stamps if t > after]
        if later:
            return min(later) - after
        await asyncio.sleep(0.005)
    return float("nan")


async def _first_delivery(deliveries: list[tuple[float, float]], after: float,
                          timeout_s: float = 60) -> float:
    """Seconds from `after` to the first arrival of an event sent after it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        arrived = [a for s, a in deliveries if s > after]
        if arrived:
            return min(arrived) - after
        await asyncio.sleep(0.005)
    return float("nan")


async def round_of(broker: BrokerProcess, mode: str, down_s: float) -> dict[str, Any]:
    with behaviour(mode):  # for the whole round: the retries come after the kill
        return await _round(broker, mode, down_s)


async def _round(broker: BrokerProcess, mode: str, down_s: float) -> dict[str, Any]:
    acks: list[float] = []
    deliveries: list[tuple[float, float]] = []  # (sent, arrived)
    reads: list[float] = []
    answers: list[asyncio.Task[None]] = []
    producer = await Producer.create(broker.address, "r")
    consumer = await Consumer.subscribe(broker.address, "r", "s", type="key_shared")
    reader = TopicReader(broker.address, "r", follow=True, start="latest")
    await reader.open()

    async def send() -> None:
        for i in range(1_000_000):
            answers.append(asyncio.create_task(
                answered(producer.send_nowait(i % 100, str(time.monotonic()).encode()))))
            await asyncio.sleep(SEND_EVERY_S)

    async def answered(event: Any) -> None:
        with contextlib.suppress(Exception):  # failed: not an answer
            await event
            acks.append(time.monotonic())

    async def receive() -> None:
        while True:
            message = await consumer.receive(120)
            consumer.ack(message)
            deliveries.append((float(message.value), time.monotonic()))

    async def read() -> None:
        async for _batch in reader:
            reads.append(time.monotonic())

    tasks = [asyncio.create_task(f()) for f in (send, receive, read)]
    await asyncio.sleep(1)
    broker.kill()
    await asyncio.sleep(down_s)
    await asyncio.to_thread(broker.start)
    serving = time.monotonic()
    row = {"mode": mode, "ack": await _first(acks, serving),
           "delivery": await _first_delivery(deliveries, serving),
           "read": await _first(reads, serving)}
    for task in tasks + answers:
        task.cancel()
    await asyncio.gather(*tasks, *answers, return_exceptions=True)
    await reader.close()
    await consumer.close()
    await producer.close(2_000)
    return row


async def run(options: argparse.Namespace) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="keybus-restart-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", "--log-level", "ERROR")
        broker.start()
        try:
            async with Admin(broker.address) as admin:
                await admin.create_topic("r", 1)
            return [await round_of(broker, MODES[i % 2], options.down_s)
                    for i in range(options.rounds)]
        finally:
            broker.stop()


def render(rows: list[dict[str, Any]], argv: list[str]) -> str:
    info = machine.describe()
    lines = [f"`python -m benchmarks restart {' '.join(argv)}`".replace(" `", "`")
             + f" — {info['date']}, {info['nproc']} cores, {info['cpu']}, Python "
             f"{info['python']}; load (1 min) {os.getloadavg()[0]:.2f} at the end", "",
             "| client retries | rounds | first answer, s: median (max) | first delivery | "
             "first read |", "|---|---|---|---|---|"]
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        cells = [f"{percentile(sorted(r[k] for r in mine), 50):.2f} "
                 f"({max(r[k] for r in mine):.2f})" for k in ("ack", "delivery", "read")]
        lines.append(f"| {mode} | {len(mine)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    rows = asyncio.run(run(options))
    print(render(rows, argv))
    return 0
