"""When the producer's buffered batches leave: Nagle's rule, on the event loop.

The rule itself is pure and lives in the accumulator (its rule 1): a batch is
ready when it is full, when its linger is up, or as soon as its partition has
no request outstanding. This shell decides *when to look*, so that no timer
sits on the path of an event sent to an idle partition:

- at the end of the loop turn in which an event opened or filled a batch
  (`schedule`: one `call_soon`, so the events a caller sends in one turn
  leave together, in one request);
- when the broker answers a request (`schedule` from the producer's
  batch-done hook): a partition that became idle sends at once what gathered
  while its request was on the wire;
- at the next linger-out of a busy partition, and on wakes from other
  threads (`wake_threadsafe`, the SyncProducer's face): the linger task.

Runs on the producer's event loop; other threads only hand over batches
(`handoff`, under the lock) and call `wake_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from sdk.accumulator import Accumulator, ReadyBatch
from sdk.sender import ProducerBatch, Sender, now_ms

LINGER_WAIT_MIN_S = 0.0005  # the linger task never spins: it waits at least this long


class BatchFlow:
    """Moves ready batches from the accumulator to the Sender (see the module docstring)."""

    def __init__(self, acc: Accumulator[Any], lock: threading.Lock | contextlib.nullcontext[None],
                 sender: Sender, topic: str, delivery_timeout_ms: int) -> None:
        self._acc = acc
        self._lock = lock
        self._sender = sender
        self._topic = topic
        self._delivery_timeout_ms = delivery_timeout_ms
        self._loop = asyncio.get_running_loop()
        # Batches drained by another thread, submitted first by the loop (order).
        self.handoff: list[ReadyBatch[Any]] = []
        self._wakeup = asyncio.Event()  # the linger task should look again
        self._scheduled = False  # a look at the end of this loop turn is queued
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._linger_loop(), name=f"keybus-linger-{self._topic}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def schedule(self) -> None:
        """Look for ready batches at the end of this loop turn (once per turn)."""
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._turn_end)

    def wake_threadsafe(self) -> None:
        """From another thread: have the linger task look again."""
        self._loop.call_soon_threadsafe(self._wakeup.set)

    def _turn_end(self) -> None:
        self._scheduled = False
        self.drain()
        with self._lock:
            waiting = self._acc.next_ready_ms() is not None
        if waiting:  # a busy partition's batch: the linger task times it
            self._wakeup.set()

    def drain(self, force: bool = False, partition: int | None = None) -> None:
        """Submit what is ready (every open batch when force; the partition's too)."""
        with self._lock:
            if partition is not None:
                self._acc.seal(partition)
            busy = None if force else self._sender.queue.busy_partitions()
            ready = self.handoff + self._acc.drain(now_ms(), force, busy)
            self.handoff = []
        self._submit(ready)

    def _submit(self, ready: list[ReadyBatch[Any]]) -> None:
        topic = self._topic
        timeout_ms = self._delivery_timeout_ms
        for r in ready:
            r.request.topic = topic
            self._sender.submit(ProducerBatch(r.request, r.count, r.token,
                                              r.created_ms + timeout_ms, r.count))

    async def _linger_loop(self) -> None:
        """Drain what is ready; sleep until a busy partition's batch lingers out or a wake."""
        acc = self._acc
        while True:
            self._wakeup.clear()
            self.drain()
            with self._lock:
                next_ms = acc.next_ready_ms(self._sender.queue.busy_partitions())
            if next_ms is None:
                await self._wakeup.wait()
                continue
            delay_s = max((next_ms - now_ms()) / 1000, LINGER_WAIT_MIN_S)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay_s):
                    await self._wakeup.wait()
