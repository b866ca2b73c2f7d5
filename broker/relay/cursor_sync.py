"""Subscription cursors carried from the upstream to a follower.

Every `relay_sync_interval_ms` a follower lists its upstream's subscriptions
and mirrors them: a missing subscription is created with the same type,
mode and filter, and each partition's cursor is moved to the upstream's
mark-delete offset (clamped to what the follower holds). Only mark-delete
travels, not the individually acknowledged ranges above it, and it travels
late: after a failover a consumer may see events again, never miss one.

A subscription that has consumers attached on this broker belongs to them
and is left alone. Subscriptions live in broker/subscription (another
issue's internals): this module goes through `SubscriptionCarrier`, the
handful of public calls it needs. `plan_sync` is pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sdk.core.pb import keybus_pb2 as pb


class SubscriptionCarrier(Protocol):
    """The subscription calls the relay uses (broker/subscription/manager.py has them)."""

    def list_all(self, topic: str) -> list[pb.SubscriptionInfo]: ...

    async def ensure(self, request: pb.SubscribeOpen, created_ms: int) -> bool: ...

    async def seek(self, topic: str, name: str, position: pb.StartPosition,
                   partitions: list[int]) -> pb.SubscriptionInfo: ...


@dataclass(frozen=True, slots=True)
class SyncPlan:
    """What to change on the follower."""

    create: list[pb.SubscriptionInfo] = field(default_factory=list)
    seeks: list[tuple[str, int, int]] = field(default_factory=list)  # (name, partition, offset)
    skipped: list[str] = field(default_factory=list)  # names with local consumers or another type


def plan_sync(upstream: Sequence[pb.SubscriptionInfo], local: Sequence[pb.SubscriptionInfo],
              end_offsets: Mapping[int, int]) -> SyncPlan:
    """Mirror upstream cursors onto local ones (see the module rules). Pure."""
    plan = SyncPlan()
    here = {info.subscription: info for info in local}
    for info in upstream:
        mine = here.get(info.subscription)
        if mine is None:
            plan.create.append(info)
            marks: dict[int, int] = {}
        elif mine.type != info.type or any(p.consumers for p in mine.partitions):
            plan.skipped.append(info.subscription)
            continue
        else:
            marks = {p.partition: p.mark_delete for p in mine.partitions}
        for partition in info.partitions:
            index = partition.partition
            if index not in end_offsets:
                continue
            target = min(partition.mark_delete, end_offsets[index])
            if marks.get(index) != target:
                plan.seeks.append((info.subscription, index, target))
    return plan


def open_of(info: pb.SubscriptionInfo) -> pb.SubscribeOpen:
    """The `open` that creates a subscription like `info` (settings only)."""
    request = pb.SubscribeOpen(topic=info.topic, subscription=info.subscription,
                               type=info.type, key_shared_mode=info.key_shared_mode,
                               max_redeliveries=info.max_redeliveries,
                               dead_letter_topic=info.dead_letter_topic,
                               initial_position=pb.StartPosition(earliest=True))
    if info.HasField("filter"):
        request.filter.CopyFrom(info.filter)
    return request


async def sync_once(upstream: Sequence[pb.SubscriptionInfo], carrier: SubscriptionCarrier,
                    topic: str, end_offsets: Mapping[int, int]) -> SyncPlan:
    """Apply one sync round (the shell around `plan_sync`)."""
    plan = plan_sync(upstream, carrier.list_all(topic), end_offsets)
    for info in plan.create:
        await carrier.ensure(open_of(info), info.created_ms)
    for name, partition, offset in plan.seeks:
        await carrier.seek(topic, name, pb.StartPosition(offset=offset), [partition])
    return plan
