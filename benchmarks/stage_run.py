"""The processes of `python -m benchmarks stages`: a traced broker, the producer, consumers.

Each value begins with the CLOCK_MONOTONIC time of its `send` call (8 bytes,
little-endian); the producer notes when each batch left its accumulator for
the Sender (a wrapper around `Sender.submit`, so a rename breaks it loudly);
each consumer process returns (offset, sent, arrived) for what it received.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks import stage_trace
from benchmarks.broker import running_broker

TOPIC = "stages"
SUBSCRIPTION = "stages"
KEYS = 1_000
RECEIVE_WAIT_S = 0.1
PERMITS = 5_000


@contextlib.contextmanager
def running_traced_broker(notes_file: Path, no_fsync: bool, task_split: bool = True,
                          round_spin_us: int = 0) -> Iterator[tuple[str, int]]:
    """A broker under stage_trace.py on 127.0.0.1 with a topic of one partition; it
    writes its notes to `notes_file` when it stops (`task_split`: with task_cpu.py's;
    `round_spin_us`: busy work at the start of each dispatcher round)."""
    launcher = ("-m", "benchmarks.stage_trace", str(notes_file),
                *(() if task_split else (stage_trace.NO_TASK_SPLIT,)),
                *((f"{stage_trace.ROUND_SPIN}{round_spin_us}",) if round_spin_us else ()))
    with running_broker(*(["--no-fsync"] if no_fsync else []), launcher=launcher) as (address, pid):
        asyncio.run(_create_topic(address))
        yield address, pid


async def _create_topic(address: str) -> None:
    from sdk import Admin

    async with Admin(address) as admin:
        await admin.create_topic(TOPIC, partitions=1)


async def produce(address: str, rate: int, events: int, value_bytes: int) -> dict[int, int]:
    """Send `events` at `rate` in 1 ms ticks; returns sent stamp -> when its batch left."""
    import sdk.sender
    from sdk import Producer

    left: dict[int, int] = {}
    submit = sdk.sender.Sender.submit

    def noted_submit(self: Any, batch: Any) -> None:
        now = time.monotonic_ns()
        for value in batch.request.batch.values:
            left[int.from_bytes(value[:8], "little")] = now
        submit(self, batch)

    sdk.sender.Sender.submit = noted_submit  # type: ignore[method-assign]
    try:
        producer = await Producer.create(address, TOPIC)
        per_tick = max(1, rate // 1000)
        padding = b"x" * (value_bytes - 8)
        start, sent = time.monotonic(), 0
        while sent < events:
            due = start + sent / rate
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            for _ in range(min(per_tick, events - sent)):
                producer.send_nowait(sent % KEYS, time.monotonic_ns().to_bytes(8, "little") + padding)
                sent += 1
        await producer.close()
    finally:
        sdk.sender.Sender.submit = submit  # type: ignore[method-assign]
    return left


def consumers_process(address: str, events: int, results: multiprocessing.Queue[Any],
                      done: Any, count: int = 1) -> None:
    """`count` Key_Shared consumers on one event loop: each says it is subscribed, then
    sends its arrivals in chunks."""
    import uvloop

    async def all_of_them() -> None:
        await asyncio.gather(*(_consume(address, events, results, done) for _ in range(count)))

    uvloop.run(all_of_them())


async def _consume(address: str, events: int, results: multiprocessing.Queue[Any],
                   done: Any) -> None:
    from sdk import Consumer

    consumer = await Consumer.subscribe(address, TOPIC, SUBSCRIPTION, type="key_shared",
                                        receiver_queue_size=PERMITS)
    results.put([])
    chunk: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + 120
    while not done.is_set() and time.monotonic() < deadline:
        try:
            batch = await consumer.receive_batch(RECEIVE_WAIT_S)
        except TimeoutError:
            if chunk:
                results.put(chunk)
                chunk = []
            continue
        arrived = time.monotonic_ns()
        for offset, value in zip(batch.offsets, batch.values, strict=True):
            chunk.append((offset, int.from_bytes(value[:8], "little"), arrived))
        consumer.ack_batch(batch)
    if chunk:
        results.put(chunk)
    await consumer.close()
