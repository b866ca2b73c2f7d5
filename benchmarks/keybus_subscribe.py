"""Keybus consumers in the comparison: one subscription type per `keybus_e2e` module.

`benchmarks/e2e_key_shared.py` (Key_Shared, auto-split),
`benchmarks/e2e_shared.py` (Shared), `benchmarks/e2e_exclusive.py` (Exclusive,
one consumer) and `benchmarks/e2e_failover.py` (Failover, one active consumer
per partition, the others standby) expose `prepare` and `consume` built here,
so all are measured the same way as the peers' consumer groups:

- prepare (parent): first waits (bounded, untimed) until the topic's
  compacted view, on by default, has folded in every stored event: the
  broker's view maintainer would otherwise fold a fresh backlog during the
  first drain and its CPU would count as that row's (Key_Shared's, which
  runs first on the stored topic, or churn's). Then a consumer attaches once
  with `start="latest"` and leaves; that creates the durable subscription
  with its cursor at the topic's end (offset 0 on the latency scenario's
  empty topic).
- consume (each consumer process): `Consumer.subscribe` (SDK, asyncio on
  uvloop), then the shared loop. Subscribing happens before the common start,
  and the cursor is at the end, so nothing is delivered before the clock runs.
  In the consume scenario (stored events), consumer 0's first fetch seeks the
  subscription to the earliest offset: that releases the stored events to
  every attached consumer at once, inside the timed part (as a Redis group
  created at id 0 starts delivering with the first XREADGROUP).
- fetch: `receive_batch` (the events of one stored record, up to the
  producer's batch), `monotonic_ns()` on arrival, `ack_batch` (acks gather for
  at most `ack_flush_ms` and go in one message), values returned for the
  latency stamps. The consumer flushes its acks before it closes.
- a consumer that is given nothing (a Failover standby) sees an empty fetch
  every RECEIVE_WAIT_S and ends once every produced event is consumed.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from benchmarks import client_loops
from benchmarks.link import Link, Task, monotonic_ns
from benchmarks.measurement import CompareWorkload
from benchmarks.payload import sent_ns_of

RECEIVER_QUEUE_SIZE = 5_000  # permits per consumer, as benchmarks/e2e_key_shared.py
RECEIVE_WAIT_S = 0.1  # an idle receive returns after this, so a consumer sees "done" in time
CLOSE_TIMEOUT_S = 10.0
VIEW_WAIT_S = 120.0  # the most `prepare` waits for the view to fold the stored events
VIEW_POLL_S = 0.1


def subscription_name(type_: str) -> str:
    """One subscription per type, so Key_Shared and Shared can share the stored topic."""
    return f"bench-{type_.replace('_', '-')}"


def run_loop(coroutine: Any) -> Any:
    try:
        import uvloop
    except ImportError:  # plain asyncio works too, a little slower
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


async def wait_view_folded(address: str, topic: str, timeout_s: float = VIEW_WAIT_S) -> None:
    """Wait until the topic's view (when it keeps one) holds every stored event, or
    `timeout_s` passed (then say so on stderr and go on)."""
    from sdk import Admin
    from sdk.core.pb import keybus_pb2 as pb

    deadline = time.monotonic() + timeout_s
    async with Admin(address) as admin:
        while True:
            info = await admin.describe_topic(topic)
            if info.config.view != pb.VIEW_ON or all(
                    p.view_offset >= p.end_offset for p in info.partitions):
                return
            if time.monotonic() >= deadline:
                print(f"view of {topic} still folding after {timeout_s:.0f} s; going on",
                      file=sys.stderr)  # stdout carries the comparison's JSON
                return
            await asyncio.sleep(VIEW_POLL_S)


def mode_for(type_: str, key_shared_mode: str) -> str | None:
    """The `mode` to subscribe with: the workload's for Key_Shared, none otherwise."""
    return key_shared_mode if type_ == "key_shared" else None


async def _create_subscription(address: str, topic: str, type_: str, name: str,
                               key_shared_mode: str) -> None:
    from sdk.consumer import Consumer

    await wait_view_folded(address, topic)
    consumer = await Consumer.subscribe(address, topic, name, type=type_,
                                        consumer_name="bench-prepare", start="latest",
                                        receiver_queue_size=2,
                                        mode=mode_for(type_, key_shared_mode))
    await asyncio.wait_for(consumer.close(), CLOSE_TIMEOUT_S)


async def seek_earliest(address: str, topic: str, subscription: str) -> None:
    """Move the subscription's cursor to the earliest offset (the stored events flow)."""
    from sdk.subscription_admin import SubscriptionAdmin

    async with SubscriptionAdmin(address) as admin:
        await admin.seek(topic, subscription, "earliest")


async def _consume(task: Task, link: Link, type_: str) -> dict[str, Any]:
    from sdk.consumer import Consumer

    subscription = subscription_name(type_)
    consumer = await Consumer.subscribe(task.address, task.stream, subscription, type=type_,
                                        consumer_name=f"c{task.index}",
                                        receiver_queue_size=RECEIVER_QUEUE_SIZE,
                                        mode=mode_for(type_, task.workload.key_shared_mode))
    receive_batch, ack_batch = consumer.receive_batch, consumer.ack_batch
    release = [task.index == 0 and not task.paced]  # consume scenario: consumer 0 seeks
    stages = Stages(task.workload.warmup_s) if task.paced else None

    async def fetch() -> tuple[Any, int]:
        if release[0]:
            release[0] = False
            await seek_earliest(task.address, task.stream, subscription)
        try:
            batch = await receive_batch(RECEIVE_WAIT_S)
        except TimeoutError:
            return [], 0
        arrived_ns = monotonic_ns()
        ack_batch(batch)
        if stages is not None:
            stages.add(batch.values, batch.record.publish_time_ms, arrived_ns)
        return batch.values, arrived_ns

    try:
        report = await client_loops.consume_async(task, link, fetch)
        await consumer.flush_acks()
        if stages is not None:
            report["stages_ms"] = stages.samples
        return report
    finally:
        began = time.monotonic()
        try:
            await asyncio.wait_for(consumer.close(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            print(f"consumer c{task.index}: close took over {time.monotonic() - began:.0f} s",
                  file=sys.stderr)  # stdout carries the comparison's JSON


class Stages:
    """Where an event's latency went, split at the broker's `publish_time_ms` (stamped
    when its group commit starts, before the fsync; wall clock, 1 ms resolution):
    due send time to commit start (producer, gRPC hop in, the partition's queue) and
    commit start to arrival (fsync, dispatch, gRPC hop out, the consumer's receive).
    Values due in the warm-up are skipped, as their latencies are."""

    def __init__(self, warmup_s: float) -> None:
        self.wall_minus_monotonic_ns = time.time_ns() - monotonic_ns()
        self.warmup_ns = int(warmup_s * 1e9)
        self.recorded_from_ns: int | None = None  # set at the first batch (after the start)
        self.samples: dict[str, list[float]] = {"due_to_commit": [], "commit_to_arrival": []}

    def add(self, values: Any, publish_time_ms: int, arrived_ns: int) -> None:
        if self.recorded_from_ns is None:  # without a warm-up, every value counts
            self.recorded_from_ns = arrived_ns + self.warmup_ns if self.warmup_ns else 0
        committed_ns = publish_time_ms * 1_000_000 - self.wall_minus_monotonic_ns
        to_commit, to_arrival = self.samples["due_to_commit"], self.samples["commit_to_arrival"]
        for sent_ns in map(sent_ns_of, values):
            if sent_ns >= self.recorded_from_ns:
                to_commit.append((committed_ns - sent_ns) / 1e6)
                to_arrival.append((arrived_ns - committed_ns) / 1e6)


def create_subscription(address: str, topic: str, type_: str, name: str,
                        key_shared_mode: str) -> None:
    """Subscription `name` of `type_` on `topic` (Key_Shared: in `key_shared_mode`), its
    cursor at the topic's end."""
    run_loop(_create_subscription(address, topic, type_, name, key_shared_mode))


def prepare(address: str, topic: str, type_: str, workload: CompareWorkload) -> None:
    """Create subscription `subscription_name(type_)` of `type_` ("key_shared", "shared",
    "exclusive", "failover"; Key_Shared in the workload's mode)."""
    create_subscription(address, topic, type_, subscription_name(type_),
                        workload.key_shared_mode)


def consume(task: Task, link: Link, type_: str) -> dict[str, Any]:
    """One consumer process of subscription type `type_`: subscribe, then the shared loop."""
    return dict(run_loop(_consume(task, link, type_)))
