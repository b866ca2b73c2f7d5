"""The processes of `python -m benchmarks stages`: a traced broker, the producer, consumers.

The producer paces as the latency scenario does (benchmarks/due_timer.py: a
thread wakes its loop at each 1 ms tick's due time) and each value begins with
the CLOCK_MONOTONIC time its send was *due* (8 bytes, little-endian). An
asyncio sleep instead wakes up to 1 ms late, and late in step with the
answers: a tick then mostly went out just after the answer to the last
request, and its wait for that answer (Nagle's rule) did not show. The
producer notes when each batch left its accumulator for the Sender and when
its answer was handled (wrappers around `Sender.submit` and `Sender._finish`,
so a rename breaks them loudly); each consumer process returns (offset, due,
arrived) for what it received.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import stage_trace
from benchmarks.broker import running_broker
from benchmarks.due_timer import DueTimer

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


@dataclass(slots=True)
class ProducerNotes:
    """Per value stamp (a tick's due time): when its batch left the accumulator for the
    Sender (`left`) and when the broker's answer to it was handled (`answered`)."""

    left: dict[int, int] = field(default_factory=dict)
    answered: dict[int, int] = field(default_factory=dict)


async def produce(address: str, rate: int, events: int, value_bytes: int) -> ProducerNotes:
    """Send `events` at `rate` in 1 ms ticks, each due at its time (DueTimer)."""
    import sdk.sender
    from sdk import Producer

    notes = ProducerNotes()
    submit, finish = sdk.sender.Sender.submit, sdk.sender.Sender._finish

    def noted_submit(self: Any, batch: Any) -> None:
        now = time.monotonic_ns()
        for value in batch.request.batch.values:
            notes.left[int.from_bytes(value[:8], "little")] = now
        submit(self, batch)

    def noted_finish(self: Any, outcomes: list[Any]) -> None:
        now = time.monotonic_ns()
        for batch, _ in outcomes:
            for value in batch.request.batch.values:
                notes.answered[int.from_bytes(value[:8], "little")] = now
        finish(self, outcomes)

    sdk.sender.Sender.submit = noted_submit  # type: ignore[method-assign]
    sdk.sender.Sender._finish = noted_finish  # type: ignore[method-assign]
    try:
        producer = await Producer.create(address, TOPIC)
        per_tick = max(1, rate // 1000)
        padding = b"x" * (value_bytes - 8)
        start, sent = time.monotonic(), 0
        async with DueTimer() as timer:
            while sent < events:
                due = start + sent / rate
                await timer.wait_until(due)
                stamp = int(due * 1e9).to_bytes(8, "little") + padding
                for _ in range(min(per_tick, events - sent)):
                    producer.send_nowait(sent % KEYS, stamp)
                    sent += 1
        await producer.close()
    finally:
        sdk.sender.Sender.submit = submit  # type: ignore[method-assign]
        sdk.sender.Sender._finish = finish  # type: ignore[method-assign]
    return notes


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
