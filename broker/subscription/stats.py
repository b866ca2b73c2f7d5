"""What `DescribeSubscription` reports about one dispatcher, and the gauges.

Read-only: built from a core's state on demand (runs on the event loop), so
describing a subscription costs nothing while nobody asks. Waiting slots
answer "why is key X blocked": per slot with events waiting (in memory,
past its floor, or given back), the reason it cannot deliver now — no_owner,
draining (with the holder's name), held (a nack delay or the dead-letter
topic), no_permits — or catching_up when it may deliver and its events are
being read again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np

from broker.metrics import (
    CONSUMER_DISPATCH_RATE,
    CONSUMER_PERMITS,
    CONSUMER_UNACKED,
    SUBSCRIPTION_BACKLOG,
    SUBSCRIPTION_DISPATCH_RATE,
    SUBSCRIPTION_UNACKED,
    SUBSCRIPTION_WAITING_SLOTS,
)
from broker.subscription.core import Kind, PartitionCore
from broker.subscription.dispatch import DEAD_LETTERING, DELAYED, DRAINING, WaitReason
from broker.subscription.dispatcher import PartitionDispatcher
from sdk.core.pb import keybus_pb2 as pb

REASON_NAMES = {WaitReason.NO_OWNER: "no_owner", WaitReason.DRAINING: "draining",
                WaitReason.HELD: "held", WaitReason.NO_PERMITS: "no_permits",
                WaitReason.CATCHING_UP: "catching_up"}


def backlog(core: PartitionCore, end_offset: int) -> int:
    """Unacknowledged events: unread ones, plus those in flight and past floors."""
    held = sum(m.holding.count for m in core.members.values())
    waiting = len(core.pending) + len(core.given_back) + sum(core.slots.floor_events.values())
    return max(0, end_offset - core.position) + held + waiting


def partition_info(dispatcher: PartitionDispatcher, now_ms: int,
                   waiting_slots_max: int) -> pb.SubscriptionPartitionInfo:
    d, core = dispatcher, dispatcher.core
    end = d.partition.end_offset
    info = pb.SubscriptionPartitionInfo(
        partition=d.index, mark_delete=core.mark_delete(),
        persisted_mark_delete=d.persisted_mark_delete, end_offset=end,
        backlog=backlog(core, end), unacked=sum(m.holding.count for m in core.members.values()),
        dispatch_rate=core.meter.rate(now_ms), read_offset=core.position,
        acked_ranges=d.persisted_runs)
    single = core.kind in (Kind.EXCLUSIVE, Kind.FAILOVER)
    for name in sorted(core.members):
        member = core.members[name]
        entry = info.consumers.add(
            name=name, partition=d.index, unacked=member.holding.count,
            permits=member.permits, dispatch_rate=member.meter.rate(now_ms),
            priority=member.spec.priority, delivered=member.delivered,
            active=core.active == name if single else True)
        if core.selector is not None:
            entry.ranges.extend(pb.HashRange(slot_first=r.slot_first, slot_last=r.slot_last)
                                for r in core.selector.ranges_of(name))
    slots = waiting_slots(core)
    info.waiting_slots_total = len(slots)
    info.waiting_events = sum(count for _, _, count in slots.values())
    ranked = sorted(slots.items(), key=lambda item: (-item[1][2], item[0]))
    for slot, (reason, holder, count) in ranked[:waiting_slots_max]:
        info.waiting_slots.add(slot=slot, reason=reason, holder=holder, events=count)
    return info


def waiting_slots(core: PartitionCore) -> dict[int, tuple[str, str, int]]:
    """slot -> (reason, holder, events waiting) for every slot with events waiting."""
    if core.kind == Kind.SHARED:
        return {}
    events: dict[int, int] = dict(core.slots.floor_events)
    for slot in core.slots.floors:
        events.setdefault(slot, 0)
    for source in (core.pending.events.slots, core.given_back.slots):
        values, counts = np.unique(source, return_counts=True)
        for slot, n in zip(values.tolist(), counts.tolist(), strict=True):
            events[slot] = events.get(slot, 0) + n
    unacked_max = core.limits.consumer_unacked_events_max
    found: dict[int, tuple[str, str, int]] = {}
    flags = core.slots.flags
    for slot, count in events.items():
        holder = ""
        owner = core.owner_of(slot)
        if owner is None:
            reason = WaitReason.NO_OWNER
        elif flags[slot] & DRAINING:
            reason, holder = WaitReason.DRAINING, str(core.slots.draining[slot][0])
        elif flags[slot] & (DELAYED | DEAD_LETTERING):
            reason = WaitReason.HELD
        elif not core.members[owner].available(unacked_max):
            reason = WaitReason.NO_PERMITS
        else:
            reason = WaitReason.CATCHING_UP
        found[slot] = (REASON_NAMES[reason], holder, count)
    return found


def update_gauges(topic: str, name: str, dispatchers: Sequence[PartitionDispatcher],
                  now_ms: int) -> None:
    """Refresh one subscription's Prometheus gauges (every second)."""
    total_backlog = unacked = 0
    rate = 0.0
    reasons = dict.fromkeys(REASON_NAMES.values(), 0)
    per_consumer: dict[str, list[float]] = {}
    for d in dispatchers:
        core = d.core
        total_backlog += backlog(core, d.partition.end_offset)
        rate += core.meter.rate(now_ms)
        for reason, _, _ in waiting_slots(core).values():
            reasons[reason] += 1
        for consumer_name, member in core.members.items():
            unacked += member.holding.count
            totals = per_consumer.setdefault(consumer_name, [0, 0.0, 0])
            totals[0] += member.holding.count
            totals[1] += member.meter.rate(now_ms)
            totals[2] += member.permits
    SUBSCRIPTION_BACKLOG.labels(topic, name).set(total_backlog)
    SUBSCRIPTION_UNACKED.labels(topic, name).set(unacked)
    SUBSCRIPTION_DISPATCH_RATE.labels(topic, name).set(rate)
    for reason, count in reasons.items():
        SUBSCRIPTION_WAITING_SLOTS.labels(topic, name, reason).set(count)
    for consumer_name, (held, consumer_rate, permits) in per_consumer.items():
        CONSUMER_UNACKED.labels(topic, name, consumer_name).set(held)
        CONSUMER_DISPATCH_RATE.labels(topic, name, consumer_name).set(consumer_rate)
        CONSUMER_PERMITS.labels(topic, name, consumer_name).set(permits)


def remove_consumer_gauges(topic: str, subscription: str, consumer: str) -> None:
    for gauge in (CONSUMER_UNACKED, CONSUMER_DISPATCH_RATE, CONSUMER_PERMITS):
        with contextlib.suppress(KeyError):
            gauge.remove(topic, subscription, consumer)
