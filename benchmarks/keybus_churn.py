"""Key_Shared under churn: consumers leave and rejoin while a stored backlog drains.

The comparison's `churn` scenario (Keybus only: neither peer keeps key order,
so nothing of theirs waits when a consumer moves). `workload.churn_events`
events are stored first (untimed, topic "churn": a backlog long enough for
several changes), then `workload.consumers` consumer processes drain them on a
Key_Shared subscription (in `workload.key_shared_mode`, consistent hashing by
default), measured like `consume` (start signal to the last delivery; consumer
0 seeks to the earliest offset first). Every
`workload.churn_period_s` the membership changes (see `detached`): consumer 0
stays; in period p >= 1 consumer 1 + (p - 1) % (n - 1) is away, so at each
boundary one consumer leaves (acks what it took, then closes) and the one that
was away rejoins. In auto-split a leaving consumer's range moves to a neighbour
(which then serves half the keys: its permits pace its half of the drain) and
a joining consumer takes half of the busiest range; in consistent hashing the
leaver's keys spread over the others and come back to it when it rejoins. A
moved slot waits until its old owner has acknowledged what it was sent or has
gone.

The steady rate the churn is held against is the same backlog drained on the
same subscription without membership changes, once before and once after the
churn drain, in the same run (`steady_events_per_s`: their mean). The
comparison's `consume` row drains another backlog (`workload.events`) at
another moment, so its ratio to the churn row mixes the machine's load drift
into the figure; the report shows both.

How long moved slots wait, measured two ways:

- by the consumers: a consumer that rejoins takes slots from the others;
  those slots wait until their old owner has acknowledged
  what it was sent. The time from its `subscribe` returning to its first
  delivery (`join_wait_ms`) is that drain plus one dispatch.
- by the broker: the parent polls `DescribeSubscription` every `POLL_S` and
  keeps (time, consumers attached, waiting_slots_total, waiting_events, slots
  reported as "draining"); `drain_episodes` gives how long runs of samples
  with draining slots lasted. The reported list holds the broker's 100 slots
  with the most waiting events, and busy consumers (no permits left) fill it
  under a backlog, so draining slots are under-reported and short drains fall
  between polls; waiting_slots_total and waiting_events count every reason.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from benchmarks import client_loops, keybus_subscribe
from benchmarks.link import Link, Task, monotonic_ns
from benchmarks.measurement import CompareWorkload, Measurement, percentile, summarize
from benchmarks.payload import key_sequence, stamped_value
from benchmarks.peer_scenarios import CHURN, CHURN_LABEL
from benchmarks.progress import progress
from benchmarks.runner import ClientFailed, ClientRun, run_clients
from benchmarks.systems import Server

TYPE = "key_shared"
STREAM = "churn"
SUBSCRIPTION = "bench-churn"
FILL_CHUNK_EVENTS = 10_000
POLL_S = 0.02
LABEL = CHURN_LABEL


# ------------------------------------------------------------------ pure parts

def detached(index: int, consumers: int, elapsed_s: float, period_s: float) -> bool:
    """Whether consumer `index` of `consumers` is away `elapsed_s` after the start."""
    if consumers < 2 or index == 0 or elapsed_s < period_s:
        return False
    period = int(elapsed_s // period_s)
    return index == 1 + (period - 1) % (consumers - 1)


def schedule(consumers: int, period_s: float, until_s: float) -> list[tuple[float, int, str]]:
    """(seconds, consumer, "leave" | "join") of every membership change before `until_s`."""
    changes: list[tuple[float, int, str]] = []
    period = 1
    while period * period_s < until_s and consumers >= 2:
        at = period * period_s
        for index in range(1, consumers):
            before, after = (detached(index, consumers, at - period_s / 2, period_s),
                             detached(index, consumers, at, period_s))
            if before != after:
                changes.append((round(at, 6), index, "leave" if after else "join"))
        period += 1
    return sorted(changes, key=lambda change: (change[0], change[2] != "join", change[1]))


@dataclass(frozen=True)
class Sample:
    """One DescribeSubscription poll, `at_s` after the start."""

    at_s: float
    consumers: int
    waiting_slots: int
    waiting_events: int
    draining_slots: int


def drain_episodes(samples: Sequence[Sample]) -> list[float]:
    """Seconds each run of samples with draining slots lasted: from its first sample with
    draining slots to the first one after it without (a run still open at the end counts
    up to the last sample)."""
    episodes: list[float] = []
    began: float | None = None
    for sample in samples:
        if sample.draining_slots and began is None:
            began = sample.at_s
        elif not sample.draining_slots and began is not None:
            episodes.append(sample.at_s - began)
            began = None
    if began is not None and samples:
        episodes.append(samples[-1].at_s - began)
    return episodes


def churn_figures(samples: Sequence[Sample], join_waits_ms: Sequence[float],
                  changes: int) -> dict[str, Any]:
    """What the row adds to the usual throughput figures: per rejoin, the wait from
    attaching to its first delivery (its moved slots drain first); the describe polls'
    draining episodes and most waiting events."""
    waits = sorted(join_waits_ms)
    episodes = [round(s * 1000, 1) for s in drain_episodes(samples)]
    return {
        "membership_changes": changes,
        "rejoins": len(waits),
        "join_wait_ms": list(join_waits_ms),
        "join_wait_p50_ms": percentile(waits, 50) if waits else None,
        "join_wait_max_ms": waits[-1] if waits else None,
        "describe_draining_episodes_ms": episodes,
        "waiting_events_max": max((s.waiting_events for s in samples), default=0),
        "waiting_slots_max": max((s.waiting_slots for s in samples), default=0),
        "draining_slots_max": max((s.draining_slots for s in samples), default=0),
        "describe_samples": len(samples),
    }


# ------------------------------------------------------------------ consumer process

async def _consume(task: Task, link: Link) -> dict[str, Any]:
    from sdk.consumer import Consumer

    period_s = task.workload.churn_period_s
    name = f"c{task.index}"

    async def attach() -> Any:
        return await Consumer.subscribe(task.address, task.stream, SUBSCRIPTION, type=TYPE,
                                        consumer_name=name,
                                        receiver_queue_size=keybus_subscribe.RECEIVER_QUEUE_SIZE,
                                        mode=task.workload.key_shared_mode)

    state: dict[str, Any] = {"consumer": await attach(), "began": None, "changes": 0,
                             "joined": None}
    join_waits_ms: list[float] = []

    async def fetch() -> tuple[Any, int]:
        if state["began"] is None:
            state["began"] = time.monotonic()
            if task.index == 0:
                await keybus_subscribe.seek_earliest(task.address, task.stream, SUBSCRIPTION)
        away = detached(task.index, task.workload.consumers, time.monotonic() - state["began"],
                        period_s)
        consumer = state["consumer"]
        if away and consumer is not None:
            await consumer.flush_acks()
            await asyncio.wait_for(consumer.close(), keybus_subscribe.CLOSE_TIMEOUT_S)
            state["consumer"], state["changes"] = None, state["changes"] + 1
            return [], 0
        if not away and consumer is None:
            consumer = state["consumer"] = await attach()
            state["changes"] += 1
            state["joined"] = time.monotonic()
        if consumer is None:
            await asyncio.sleep(0.01)
            return [], 0
        try:
            batch = await consumer.receive_batch(keybus_subscribe.RECEIVE_WAIT_S)
        except TimeoutError:
            return [], 0
        arrived_ns = monotonic_ns()
        consumer.ack_batch(batch)
        if state["joined"] is not None:  # the first delivery since rejoining
            join_waits_ms.append(round((time.monotonic() - state["joined"]) * 1000, 1))
            state["joined"] = None
        return batch.values, arrived_ns

    try:
        report = await client_loops.consume_async(task, link, fetch)
        if state["consumer"] is not None:
            await state["consumer"].flush_acks()
        report.update(membership_changes=state["changes"], join_waits_ms=join_waits_ms)
        return report
    finally:
        if state["consumer"] is not None:
            await asyncio.wait_for(state["consumer"].close(), keybus_subscribe.CLOSE_TIMEOUT_S)


def consume(task: Task, link: Link) -> dict[str, Any]:
    """A churning consumer process (picklable: spawned by the runner)."""
    return dict(keybus_subscribe.run_loop(_consume(task, link)))


# ------------------------------------------------------------------ parent

class _Poller:
    """DescribeSubscription every POLL_S on a thread of its own, until stopped."""

    def __init__(self, address: str, topic: str) -> None:
        self.address, self.topic = address, topic
        self.samples: list[Sample] = []
        self.began = time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._poll()), daemon=True)

    async def _poll(self) -> None:
        from sdk.subscription_admin import SubscriptionAdmin

        async with SubscriptionAdmin(self.address) as admin:
            while not self.stop.is_set():
                try:
                    info = await admin.describe_subscription(self.topic, SUBSCRIPTION)
                except Exception:  # a describe that fails is a gap, not a failure
                    await asyncio.sleep(POLL_S)
                    continue
                at = time.monotonic() - self.began
                for p in info.partitions:
                    self.samples.append(Sample(
                        round(at, 4), len(p.consumers), p.waiting_slots_total, p.waiting_events,
                        sum(1 for w in p.waiting_slots if w.reason == "draining")))
                await asyncio.sleep(POLL_S)

    def __enter__(self) -> _Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


async def _fill(address: str, topic: str, workload: CompareWorkload) -> None:
    """Store `churn_events` events (untimed): the SDK's bulk path, the workload's keys."""
    from sdk import Admin, Producer

    async with Admin(address) as admin:
        await admin.create_topic(topic, partitions=1)
    keys = key_sequence(workload.keys, workload.churn_events)
    chunk = FILL_CHUNK_EVENTS
    async with await Producer.create(address, topic, batch_events_max=workload.batch_events,
                                     buffer_events_max=max(100_000, chunk)) as producer:
        for start in range(0, workload.churn_events, chunk):
            n = min(chunk, workload.churn_events - start)
            value = stamped_value(workload.value_bytes, monotonic_ns())
            batch_keys = [keys[(start + j) % len(keys)] for j in range(n)]
            await producer.send_batch(batch_keys, [value] * n)
        await producer.flush()


def run(server: Server, workload: CompareWorkload, show_progress: bool) -> dict[str, Any]:
    """The churn row: store `churn_events`, then drain them three times over, each drain
    from the earliest offset on the same subscription: without membership changes, with
    them (the row's figures), and without again. The two drains without changes are the
    churn's own steady rate: same backlog, same broker, same minute of a shared machine
    (their mean, so a load that drifts over the three counts on both sides)."""
    try:
        keybus_subscribe.run_loop(_fill(server.address, STREAM, workload))
        keybus_subscribe.create_subscription(server.address, STREAM, TYPE, SUBSCRIPTION,
                                             workload.key_shared_mode)
    except Exception as error:  # the row says why; the comparison goes on
        return _note(f"failed storing the backlog: {type(error).__name__}: {error}")
    steady = replace(workload, churn_period_s=math.inf)
    try:
        before, _ = _drain(server, steady, show_progress, "steady")
        run_, samples = _drain(server, workload, show_progress, LABEL)
        after, _ = _drain(server, steady, show_progress, "steady")
    except ClientFailed as error:
        return _note(f"failed: {str(error).strip().splitlines()[-1][:300]}")
    row = summarize(Measurement(
        system=LABEL, scenario=CHURN, events=run_.events, seconds=run_.seconds,
        client_cpu_s=run_.client_cpu_s, server_cpu_s=run_.server_cpu_s,
        value_bytes=workload.value_bytes, consumers=workload.consumers,
        complete=run_.complete))
    consumers = [r for r in run_.reports if r["role"].startswith("consumer")]
    row.update(churn_figures(samples,
                             [w for r in consumers for w in r.get("join_waits_ms", ())],
                             sum(r.get("membership_changes", 0) for r in consumers)),
               family="Keybus", churn_period_s=workload.churn_period_s,
               planned_changes=len(schedule(workload.consumers, workload.churn_period_s,
                                            run_.seconds)))
    row.update(steady_figures([before, after]))
    return row


def steady_figures(drains: Sequence[ClientRun]) -> dict[str, Any]:
    """The drains without membership changes: each one's events/s, their mean, and the
    broker's CPU per event over them."""
    rates = [d.events / d.seconds if d.seconds > 0 else 0.0 for d in drains]
    events = sum(d.events for d in drains)
    return {"steady_events_per_s_each": [round(r) for r in rates],
            "steady_events_per_s": round(sum(rates) / len(rates)) if rates else None,
            "steady_cpu_s_per_m_server": round(sum(d.server_cpu_s for d in drains)
                                               / events * 1e6, 2) if events else None,
            "steady_complete": all(d.complete for d in drains)}


def _drain(server: Server, workload: CompareWorkload, show_progress: bool, label: str,
           ) -> tuple[ClientRun, list[Sample]]:
    """One drain of the stored backlog by `workload.consumers` consumer processes, with
    the describe poller's samples."""
    task = Task(server.address, STREAM, workload)
    bar = progress(label, workload.churn_events, show_progress)
    try:
        with _Poller(server.address, STREAM) as poller:
            run_ = run_clients(None, consume, task, server.pid, bar, workload.churn_events)
    finally:
        bar.close()
    return run_, poller.samples


def _note(note: str) -> dict[str, Any]:
    return {"system": LABEL, "family": "Keybus", "scenario": CHURN, "note": note}
