"""The producer and consumer loops every system's client shares.

A driver connects (and subscribes), then hands the loop how to send a batch
and how to fetch-and-ack one; the loop says ready, waits for the common start
(`Link.start`), and decides batch sizes, pacing, counting, latencies and when
to stop, so the workload is the same for Keybus, Redis and NATS. Each loop is bounded by its
event count and by the task's hard stop time. A sync and an async version:
Redis's client is sync, nats-py and the Keybus SDK are asyncio.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from benchmarks.due_timer import DueTimer
from benchmarks.link import Link, Task, monotonic_ns
from benchmarks.pacing import due_s, events_limit, next_batch_events
from benchmarks.payload import key_sequence, latencies_ms, stamped_value

Send = Callable[[Sequence[int], bytes], None]  # keys, one value for the batch; may return before acks
Fetch = Callable[[], tuple[Sequence[bytes], int]]  # values of one batch, ns when they arrived; acked
AsyncSend = Callable[[Sequence[int], bytes], Awaitable[None]]
AsyncFetch = Callable[[], Awaitable[tuple[Sequence[bytes], int]]]
Report = dict[str, Any]

# The shared counters and the stop signal are cross-process locks: a loop touches them
# at most this often (and whenever it idles or ends), not once per send or fetch.
LINK_EVERY_S = 0.01


class _LinkView:
    """What one loop reads from and adds to the Link, at most every LINK_EVERY_S.

    Counts gather here and go to the Link's counter in one locked add; the stop
    signal is read once per interval. `publish` (idle, or done) adds what is left
    at once, so a reader of the counters never waits on a count kept here."""

    def __init__(self, link: Link, add: Callable[[int], None]) -> None:
        self._link = link
        self._add = add
        self._pending = 0
        self._next_s = 0.0
        self._stopped = False

    def add(self, n: int, now_s: float) -> None:
        self._pending += n
        if now_s >= self._next_s:
            self._refresh(now_s)

    def stopped(self, now_s: float) -> bool:
        if now_s >= self._next_s:
            self._refresh(now_s)
        return self._stopped

    def publish(self) -> None:
        if self._pending:
            self._add(self._pending)
            self._pending = 0

    def _refresh(self, now_s: float) -> None:
        self.publish()
        self._stopped = self._link.stopped()
        self._next_s = now_s + LINK_EVERY_S


class _Batches:
    """Which keys the next send carries and when it is due (shared by both loops)."""

    def __init__(self, task: Task, link: Link) -> None:
        self.task = task
        self.keys = key_sequence(task.workload.keys, events_limit(task.workload, task.paced))
        link.start()
        self.began_s = time.monotonic()
        self.hard_stop_s = task.hard_stop_monotonic(self.began_s)
        self.sent = 0
        self.stopped_early = False
        # Paced: how late each send started against its due time (the client's own timer
        # and scheduling, the same loop for every system), recorded after the warm-up.
        self.late_ms: list[float] = []
        self.recorded_from_s = self.began_s + task.workload.warmup_s
        self.link = _LinkView(link, link.add_produced)

    def next_keys(self, link: Link) -> list[int]:
        now = time.monotonic()
        if self.link.stopped(now) or now > self.hard_stop_s:
            self.stopped_early = True
            return []
        n = next_batch_events(self.sent, now - self.began_s, self.task.workload, self.task.paced)
        start = self.sent % len(self.keys)
        if start + n <= len(self.keys):
            return self.keys[start:start + n]
        return [self.keys[(start + j) % len(self.keys)] for j in range(n)]

    def wait_s(self) -> float:
        """Seconds until the next send is due (0 when not paced or late)."""
        return max(0.0, self.due() - time.monotonic())

    def due(self) -> float:
        """CLOCK_MONOTONIC time the next send is due (the start when not paced)."""
        if not self.task.paced:
            return self.began_s
        return self.began_s + due_s(self.sent, self.task.workload.rate_per_s)

    def note_send(self) -> None:
        """A paced send starts now: record how late it is."""
        if self.task.paced:
            due = self.began_s + due_s(self.sent, self.task.workload.rate_per_s)
            if due >= self.recorded_from_s:
                self.late_ms.append((time.monotonic() - due) * 1000)

    def report(self) -> Report:
        report: Report = {"events": self.sent, "last_ns": monotonic_ns(),
                          "stopped_early": self.stopped_early}
        if self.late_ms:
            report["stages_ms"] = {"due_to_send": self.late_ms}
        return report

    def value(self) -> bytes:
        """The value of the next send, stamped with its send time.

        Paced (the latency scenario) runs open loop: the stamp is the time the
        send was *due* on the fixed schedule, not when the loop got to it, so a
        client or server stall that delays later sends counts against every
        event it delayed (no coordinated omission)."""
        if self.task.paced:
            due = self.began_s + due_s(self.sent, self.task.workload.rate_per_s)
            return stamped_value(self.task.workload.value_bytes, int(due * 1e9))
        return stamped_value(self.task.workload.value_bytes, monotonic_ns())

    def sent_batch(self, n: int, link: Link) -> None:
        self.sent += n
        self.link.add(n, time.monotonic())

    def done(self) -> None:
        """Sending is over: every count reaches the Link (before acks are awaited)."""
        self.link.publish()


def produce(task: Task, link: Link, send: Send, flush: Callable[[], None]) -> Report:
    """Send batches until the count, duration or stop; then wait for every ack."""
    batches = _Batches(task, link)
    while keys := batches.next_keys(link):
        time.sleep(batches.wait_s())
        batches.note_send()
        send(keys, batches.value())
        batches.sent_batch(len(keys), link)
    batches.done()
    flush()
    report = batches.report()
    link.finish_producing()
    return report


async def produce_async(task: Task, link: Link, send: AsyncSend,
                        flush: Callable[[], Awaitable[None]]) -> Report:
    """`produce` for asyncio clients; paced sends wait on a DueTimer (see due_timer.py),
    as precise as the sync loop's `time.sleep`."""
    batches = _Batches(task, link)
    async with DueTimer(active=task.paced) as timer:
        while keys := batches.next_keys(link):
            await timer.wait_until(batches.due())
            batches.note_send()
            await send(keys, batches.value())
            batches.sent_batch(len(keys), link)
    batches.done()
    await flush()
    report = batches.report()
    link.finish_producing()
    return report


class _Tally:
    """What a consumer counted: events, the last arrival, latencies when paced."""

    def __init__(self, task: Task, link: Link) -> None:
        link.start()
        self.paced = task.paced
        self.hard_stop_s = task.hard_stop_monotonic(time.monotonic())
        self.events = 0
        self.last_ns = 0
        self.latencies_ms: list[float] = []
        # Values due before this (the warm-up) are counted, their latencies not recorded;
        # without a warm-up every value is (the producer's clock started a little earlier).
        warmup_ns = int(task.workload.warmup_s * 1e9)
        self.recorded_from_ns = monotonic_ns() + warmup_ns if warmup_ns else 0
        self.link = _LinkView(link, link.add_consumed)

    def running(self, link: Link) -> bool:
        now = time.monotonic()
        return not self.link.stopped(now) and now < self.hard_stop_s

    def idle(self, link: Link) -> bool:
        """Nothing came: publish the count, then say whether every event is consumed."""
        self.link.publish()
        return link.consumption_done()

    def add(self, values: Sequence[bytes], received_ns: int, link: Link) -> None:
        self.events += len(values)
        self.last_ns = received_ns
        self.link.add(len(values), time.monotonic())
        if self.paced:
            self.latencies_ms.extend(latencies_ms(values, received_ns, self.recorded_from_ns))

    def report(self) -> Report:
        self.link.publish()
        return {"events": self.events, "last_ns": self.last_ns, "latencies_ms": self.latencies_ms}


def consume(task: Task, link: Link, fetch: Fetch) -> Report:
    """Fetch-and-ack until every produced event is consumed, or stop."""
    tally = _Tally(task, link)
    while tally.running(link):
        values, received_ns = fetch()
        if values:
            tally.add(values, received_ns, link)
        elif tally.idle(link):
            break
    return tally.report()


async def consume_async(task: Task, link: Link, fetch: AsyncFetch) -> Report:
    """`consume` for asyncio clients."""
    tally = _Tally(task, link)
    while tally.running(link):
        values, received_ns = await fetch()
        if values:
            tally.add(values, received_ns, link)
        elif tally.idle(link):
            break
    return tally.report()
