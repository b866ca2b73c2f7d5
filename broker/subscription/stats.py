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
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from broker.metrics import (
    CONSUMER_DISPATCH_RATE,
    CONSUMER_PERMITS,
    CONSUMER_UNACKED,
    SUBSCRIPTION_BACKLOG,
    SUBSCRIPTION_DISPATCH_RATE,
    SUBSCRIPTION_UNACKED,
    SUBSCRIPTION_WAITING_SLOTS,
)
from broker.subscription.array_ops import distinct
from broker.subscription.core import Kind, PartitionCore
from broker.subscription.dispatch import DEAD_LETTERING, DELAYED, DRAINING, WaitReason
from broker.subscription.dispatcher import PartitionDispatcher
from broker.subscription.members import permit_array
from sdk.core.pb import keybus_pb2 as pb

REASON_NAMES = {WaitReason.NO_OWNER: "no_owner", WaitReason.DRAINING: "draining",
                WaitReason.HELD: "held", WaitReason.NO_PERMITS: "no_permits",
                WaitReason.CATCHING_UP: "catching_up"}


def backlog(core: PartitionCore, end_offset: int) -> int:
    """Unacknowledged events: unread ones, plus those in flight and past floors."""
    held = sum(m.holding.count for m in core.members.values())
    waiting = len(core.pending) + len(core.given_back) + sum(core.slots.floor_events.values())
    return max(0, end_offset - core.position) + held + waiting


@dataclass(frozen=True, slots=True)
class Waiting:
    """Every slot with events waiting: parallel arrays, most events first (then slot)."""

    slots: npt.NDArray[np.int64]
    reasons: npt.NDArray[np.int64]  # WaitReason values
    events: npt.NDArray[np.int64]


def waiting_slots(core: PartitionCore) -> Waiting:
    """Slots with events waiting (in memory, past a floor or given back), with the reason
    each cannot deliver now; a few numpy passes, however many slots wait."""
    empty = np.zeros(0, np.int64)
    if core.kind == Kind.SHARED:
        return Waiting(empty, empty, empty)
    floor_slots, _ = core.slots.floor_arrays()
    given = core.given_back.slots.astype(np.int64)
    # the look-ahead's slots from its events, not a scan of its per-slot counts (which
    # would map every page of them: `slot_array`)
    slots = distinct(np.concatenate((floor_slots, core.pending.events.slots, given)))
    if not len(slots):
        return Waiting(empty, empty, empty)
    events = core.pending.per_slot[slots].astype(np.int64)
    if len(given):
        events += np.bincount(np.searchsorted(slots, given), minlength=len(slots))
    past = core.slots.floor_events
    if past:
        keys = np.fromiter(past.keys(), np.int64, len(past))
        values = np.fromiter(past.values(), np.int64, len(past))
        i = np.searchsorted(slots, keys)
        found = (i < len(slots)) & (slots[np.minimum(i, len(slots) - 1)] == keys)
        np.add.at(events, i[found], values[found])
    owner = core._owners[slots].astype(np.intp)
    available = permit_array(core._by_index, core.limits.consumer_unacked_events_max)[owner]
    flags = core.slots.flags[slots]
    reasons = np.select(
        [owner == 0, (flags & DRAINING) != 0, (flags & (DELAYED | DEAD_LETTERING)) != 0,
         available == 0],
        [WaitReason.NO_OWNER, WaitReason.DRAINING, WaitReason.HELD, WaitReason.NO_PERMITS],
        WaitReason.CATCHING_UP).astype(np.int64)
    order = np.lexsort((slots, -events))
    return Waiting(slots[order], reasons[order], events[order])


def partition_info(dispatcher: PartitionDispatcher, now_ms: int,
                   waiting_slots_max: int) -> pb.SubscriptionPartitionInfo:
    d, core = dispatcher, dispatcher.core
    end = d.partition.end_offset
    info = pb.SubscriptionPartitionInfo(
        partition=d.index, mark_delete=core.mark_delete(),
        persisted_mark_delete=d.persisted_mark_delete, end_offset=end,
        backlog=backlog(core, end), unacked=sum(m.holding.count for m in core.members.values()),
        dispatch_rate=core.meter.rate(now_ms), read_offset=core.position,
        acked_ranges=d.persisted_acked_ranges)
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
    waiting = waiting_slots(core)
    info.waiting_slots_total = len(waiting.slots)
    info.waiting_events = int(waiting.events.sum())
    for slot, reason, count in zip(waiting.slots[:waiting_slots_max].tolist(),
                                   waiting.reasons[:waiting_slots_max].tolist(),
                                   waiting.events[:waiting_slots_max].tolist(), strict=True):
        holder = str(core.slots.draining[slot][0]) if reason == WaitReason.DRAINING else ""
        info.waiting_slots.add(slot=slot, reason=REASON_NAMES[WaitReason(reason)],
                               holder=holder, events=count)
    return info


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
        found = np.bincount(waiting_slots(core).reasons, minlength=len(WaitReason) + 1)
        for wait_reason, reason_name in REASON_NAMES.items():
            reasons[reason_name] += int(found[wait_reason])
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
