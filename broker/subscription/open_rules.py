"""What a consumer's open must satisfy before anything is created or attached.

Pure checks of a `SubscribeOpen` against the broker's settings and, for a
consumer joining, the subscription's current consumers: each raises the
BrokerError that names the field and what is allowed (the broker trusts no
field a client could compute wrongly). `SubscriptionManager` runs them in
order: the consumer's own fields (`consumer_spec`), the subscription's
(`check_open`), sticky ranges once the subscription's mode is known
(`check_sticky`), and room for one more consumer (`check_room`).
"""

from __future__ import annotations

from collections.abc import Collection

from broker.config import Settings
from broker.errors import BrokerError
from broker.filtering import compile_selector
from broker.partition import TopicMeta
from broker.subscription.consumer_state import ConsumerSpec
from broker.subscription.spec import SubscriptionSpec
from sdk.core.model import HashRange, RangeError
from sdk.core.names import is_name
from sdk.core.pb import keybus_pb2 as pb


def consumer_spec(request: pb.SubscribeOpen, meta: TopicMeta, s: Settings) -> ConsumerSpec:
    """The consumer's own fields: names, partitions, sticky ranges' bounds, limits."""
    limit = s.topic_name_bytes_max
    for field, value in (("subscription", request.subscription),
                         ("consumer_name", request.consumer_name)):
        if not is_name(value, limit):
            raise BrokerError("subscription_name_invalid", field=field, value=value, max=limit)
    partitions = sorted(set(request.partitions)) or list(range(meta.partitions))
    for index in partitions:
        if index >= meta.partitions:
            raise BrokerError("partition_out_of_range", partition=index, topic=meta.name,
                              last=meta.partitions - 1)
    try:
        ranges = tuple(HashRange(r.slot_first, r.slot_last) for r in request.sticky_ranges)
    except RangeError as e:
        raise BrokerError("hash_range_invalid", detail=f"sticky_ranges: {e}") from None
    timeout = request.ack_timeout_ms
    if timeout and not s.ack_timeout_ms_min <= timeout <= s.ack_timeout_ms_max:
        raise BrokerError("subscribe_limit_invalid", field="ack_timeout_ms", value=timeout,
                          allowed=f"0 (none) or {s.ack_timeout_ms_min}..{s.ack_timeout_ms_max}")
    if request.ack_timeout_by_client:  # checked all the same; the client nacks what outlives it
        timeout = 0
    if request.look_ahead_max > s.look_ahead_events_max:
        raise BrokerError("subscribe_limit_invalid", field="look_ahead_max",
                          value=request.look_ahead_max,
                          allowed=f"0 (broker default) or 1..{s.look_ahead_events_max}")
    return ConsumerSpec(request.consumer_name, request.priority, ranges, timeout,
                        request.look_ahead_max, tuple(partitions))


def check_open(request: pb.SubscribeOpen, asked: SubscriptionSpec, s: Settings) -> None:
    """The subscription's fields: type, mode, redeliveries, dead letters, key filter."""
    if request.type not in pb.SubscriptionType.values():
        raise BrokerError("subscribe_limit_invalid", field="type", value=request.type,
                          allowed="EXCLUSIVE (0), SHARED (1), FAILOVER (2), KEY_SHARED (3)")
    if request.key_shared_mode not in pb.KeySharedMode.values():
        raise BrokerError("subscribe_limit_invalid", field="key_shared_mode",
                          value=request.key_shared_mode,
                          allowed="AUTO_SPLIT (0), STICKY (1), CONSISTENT (2)")
    if request.max_redeliveries > s.max_redeliveries_max:
        raise BrokerError("subscribe_limit_invalid", field="max_redeliveries",
                          value=request.max_redeliveries,
                          allowed=f"0 (no dead-letter topic) or 1..{s.max_redeliveries_max}")
    asked.check_dead_letter(bool(request.dead_letter_topic), s.topic_name_bytes_max)
    compile_selector(asked.key_filter(), {})  # raises filter_invalid


def check_sticky(request: pb.SubscribeOpen, asked: SubscriptionSpec) -> None:
    """A consumer's sticky ranges: required in sticky mode (named, or the existing
    subscription's when it names none), refused otherwise (a subscription created
    without a consumer, by `ensure`, needs none)."""
    sticky = asked.type == pb.KEY_SHARED and asked.mode == pb.STICKY
    if request.sticky_ranges and not sticky:
        raise BrokerError("key_shared_refused", detail="sticky_ranges are only for "
                          "type key_shared with mode sticky")
    if sticky and not request.sticky_ranges:
        raise BrokerError("key_shared_refused", detail=(
            f"consumer {request.consumer_name!r} declared no hash range; sticky mode needs "
            f"at least one inclusive range within 0..65535"))


def check_room(spec: SubscriptionSpec, consumers: Collection[str], consumer: str,
               s: Settings) -> None:
    """Room for `consumer` among the subscription's `consumers` (names attached now)."""
    if consumer in consumers:
        raise BrokerError("consumer_name_taken", consumer=consumer, subscription=spec.name,
                          topic=spec.topic)
    if spec.type == pb.EXCLUSIVE and consumers:
        raise BrokerError("exclusive_consumer_busy", subscription=spec.name, topic=spec.topic,
                          holder=next(iter(consumers)), consumer=consumer)
    if len(consumers) >= s.consumers_per_subscription_max:
        raise BrokerError("too_many_consumers", subscription=spec.name, topic=spec.topic,
                          count=len(consumers), max=s.consumers_per_subscription_max)
