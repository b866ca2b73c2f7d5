"""What `DescribeSubscription` reports about one dispatcher, and the gauges.

Read-only: built from a dispatcher's state on demand (runs on the event
loop), so describing a subscription costs nothing while nobody asks. Waiting
slots answer "why is key X blocked": the reason of its first waiting event
in the last round (no_owner, draining with the holder's name, held by a
retry, no_permits), plus slots whose nacked events wait out a delay.
"""

from __future__ import annotations

import contextlib

from broker.metrics import (
    CONSUMER_DISPATCH_RATE,
    CONSUMER_PERMITS,
    CONSUMER_UNACKED,
)
from broker.subscription.dispatch import WaitReason
from broker.subscription.dispatcher import PartitionDispatcher
from sdk.core.pb import keybus_pb2 as pb

REASON_NAMES = {WaitReason.NO_OWNER: "no_owner", WaitReason.DRAINING: "draining",
                WaitReason.HELD: "held", WaitReason.NO_PERMITS: "no_permits"}


def partition_info(dispatcher: PartitionDispatcher, now_ms: int,
                   waiting_slots_max: int) -> pb.SubscriptionPartitionInfo:
    d = dispatcher
    end = d.partition.end_offset
    info = pb.SubscriptionPartitionInfo(
        partition=d.index, mark_delete=d.cursor.mark_delete,
        persisted_mark_delete=d.persisted_mark_delete, end_offset=end,
        backlog=d.cursor.backlog(end), unacked=sum(len(c.unacked) for c in d.consumers.values()),
        dispatch_rate=d.meter.rate(now_ms), read_offset=d.read_position,
        acked_ranges=len(d.cursor.acked_ranges()))
    for name in sorted(d.consumers):
        consumer = d.consumers[name]
        entry = info.consumers.add(
            name=name, partition=d.index, unacked=len(consumer.unacked),
            permits=consumer.permits, dispatch_rate=consumer.meter.rate(now_ms),
            priority=consumer.session.spec.priority, delivered=consumer.delivered,
            active=d.active == name if d.spec.type in (pb.EXCLUSIVE, pb.FAILOVER) else True)
        if d.key_shared is not None:
            entry.ranges.extend(pb.HashRange(slot_first=r.slot_first, slot_last=r.slot_last)
                                for r in d.key_shared.selector.ranges_of(name))
    slots = waiting_slots(d)
    info.waiting_slots_total = len(slots)
    info.waiting_events = sum(count for _, _, count in slots.values())
    ranked = sorted(slots.items(), key=lambda item: (-item[1][2], item[0]))
    for slot, (reason, holder, count) in ranked[:waiting_slots_max]:
        info.waiting_slots.add(slot=slot, reason=reason, holder=holder, events=count)
    return info


def waiting_slots(d: PartitionDispatcher) -> dict[int, tuple[str, str, int]]:
    """slot -> (reason, holder, events waiting) for every slot with waiting events."""
    found: dict[int, tuple[str, str, int]] = {}
    offsets, reasons = d.last_waiting
    replay = d.replay
    draining = d.tracker.draining
    for offset, reason in zip(offsets, reasons, strict=True):
        slot = replay.get(offset)
        if slot is None:
            continue
        known = found.get(slot)
        if known is None:
            found[slot] = (REASON_NAMES[WaitReason(reason)], draining.get(slot, ""), 1)
        else:
            found[slot] = (known[0], known[1], known[2] + 1)
    for offset, slot in d.redeliveries.retrying.items():
        if slot not in found and offset not in replay:
            found[slot] = ("held", "", 1)
    return found


def remove_consumer_gauges(topic: str, subscription: str, consumer: str) -> None:
    for gauge in (CONSUMER_UNACKED, CONSUMER_DISPATCH_RATE, CONSUMER_PERMITS):
        with contextlib.suppress(KeyError):
            gauge.remove(topic, subscription, consumer)
