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
- at the next linger-out of a busy partition: one loop timer (`call_at`),
  armed only while a busy partition's batch waits and moved only when a batch
  must leave earlier than it fires (no task, no event per look);
- on wakes from other threads (`wake_threadsafe`, the SyncProducer's face).

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

LINGER_WAIT_MIN_S = 0.0005  # the linger timer never spins: it waits at least this long


class BatchFlow:
    """Moves ready batches from the accumulator to the Sender (see the module docstring)."""

    def __init__(self, acc: Accumulator[Any], lock: threading.Lock | contextlib.nullcontext[None],
                 sender: Sender, topic: str, delivery_timeout_ms: int,
                 nagle_window: int = 1) -> None:
        self._acc = acc
        self._window = nagle_window  # requests a partition may have out before it batches
        self._lock = lock
        self._sender = sender
        self._topic = topic
        self._delivery_timeout_ms = delivery_timeout_ms
        self._loop = asyncio.get_running_loop()
        # Batches drained by another thread, submitted first by the loop (order).
        self.handoff: list[ReadyBatch[Any]] = []
        self._scheduled = False  # a look at the end of this loop turn is queued
        self._timer: asyncio.TimerHandle | None = None  # the next linger-out look
        self._timer_ms = 0.0  # when it fires (monotonic ms, as sender.now_ms)
        self._running = False

    def start(self) -> None:
        self._running = True
        self.schedule()

    async def stop(self) -> None:
        self._running = False
        self._cancel_timer()

    def schedule(self) -> None:
        """Look for ready batches at the end of this loop turn (once per turn)."""
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._turn_end)

    def wake_threadsafe(self) -> None:
        """From another thread: look again on the loop."""
        self._loop.call_soon_threadsafe(self.schedule)

    def _turn_end(self) -> None:
        self._scheduled = False
        self._look()

    def _look(self) -> None:
        """Submit what is ready; keep the linger timer at the next busy batch's linger-out."""
        busy = self._sender.queue.busy_partitions(self._window)
        self._drain(False, None, busy)
        if not self._running:
            return
        if not self._acc.waiting and not self.handoff:  # all sent: no linger to time
            self._cancel_timer()
            return
        with self._lock:
            next_ms = self._acc.next_ready_ms(self._sender.queue.busy_partitions(self._window))
        if next_ms is None:
            self._cancel_timer()
        elif self._timer is None or next_ms < self._timer_ms:
            self._arm(next_ms)

    def _arm(self, at_ms: int) -> None:
        self._cancel_timer()
        now = now_ms()
        delay_s = max((at_ms - now) / 1000, LINGER_WAIT_MIN_S)
        self._timer_ms = now + delay_s * 1000
        self._timer = self._loop.call_later(delay_s, self._fired)

    def _fired(self) -> None:
        self._timer = None
        self._look()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def drain(self, force: bool = False, partition: int | None = None) -> None:
        """Submit what is ready (every open batch when force; the partition's too)."""
        self._drain(force, partition, None if force else self._sender.queue.busy_partitions(self._window))

    def _drain(self, force: bool, partition: int | None, busy: set[int] | None) -> None:
        with self._lock:
            if partition is not None:
                self._acc.seal(partition)
            ready = self._acc.drain(now_ms(), force, busy)
            if self.handoff:
                ready = self.handoff + ready
                self.handoff = []
        if ready:
            self._submit(ready)

    def _submit(self, ready: list[ReadyBatch[Any]]) -> None:
        topic = self._topic
        timeout_ms = self._delivery_timeout_ms
        for r in ready:
            r.request.topic = topic
            self._sender.submit(ProducerBatch(r.request, r.count, r.token,
                                              r.created_ms + timeout_ms, r.count))
