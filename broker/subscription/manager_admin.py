"""Subscription administration: list, describe, seek, delete, ensure.

Job: the admin calls of `SubscriptionManager` (the SubscriptionAdmin service
and relay followers' `ensure`), apart from the consumer path (attach, acks,
nacks) that runs per message. They share the manager's registry and its
create lock: a seek's cursor write, a delete and a creation take turns under
it, so a delete of the topic never leaves keys written after it (see
`SubscriptionManager.drop_topic`). Kept apart so each file keeps one job and
stays short; it is a base class of `SubscriptionManager`, which provides the
state and helpers it declares. `Subscription` (the registry's entry) lives
here so both can name it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from broker.config import Settings
from broker.errors import BrokerError, quote
from broker.log.rocks_store import RocksStore
from broker.metrics import SUBSCRIPTION_BACKLOG, SUBSCRIPTION_DISPATCH_RATE, SUBSCRIPTION_UNACKED
from broker.partition import TopicMeta, now_ms
from broker.subscription.consumer_state import Session
from broker.subscription.dead_letter_cycle import Hop
from broker.subscription.dead_letter_watch import CycleWatch, report_cycles
from broker.subscription.dispatcher import PartitionDispatcher
from broker.subscription.dispatcher_upkeep import seek_together
from broker.subscription.open_rules import check_open
from broker.subscription.spec import SubscriptionSpec
from broker.subscription.stats import partition_info
from broker.supervision import describe_cause
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb

log = logging.getLogger("keybus.subscriptions")


class Subscription:
    """One subscription: its settings, dispatchers and attached streams."""

    def __init__(self, spec: SubscriptionSpec, meta: TopicMeta,
                 dispatchers: list[PartitionDispatcher]) -> None:
        self.spec = spec
        self.meta = meta
        self.dispatchers = dispatchers
        self.sessions: dict[str, Session] = {}


class ManagerAdmin:
    """See the module docstring; `SubscriptionManager` provides the state it declares."""

    registry: TopicRegistry
    store: RocksStore
    settings: Settings
    _default_mode: int
    _topics: dict[str, dict[str, Subscription]]
    _create_lock: asyncio.Lock
    _cycles: CycleWatch

    def _live_meta(self, meta: TopicMeta) -> TopicMeta:
        raise NotImplementedError

    def _hops(self) -> list[Hop]:
        raise NotImplementedError

    def _new(self, spec: SubscriptionSpec, meta: TopicMeta,
             start: pb.StartPosition) -> Subscription:
        raise NotImplementedError

    async def _save(self, subscription: Subscription) -> None:
        raise NotImplementedError

    async def _end(self, subscription: Subscription, error: BrokerError, persist: bool) -> None:
        raise NotImplementedError

    def _subscription(self, topic: str, name: str) -> Subscription:
        self.registry.meta(topic)
        subscription = self._topics.get(topic, {}).get(name)
        if subscription is None:
            raise BrokerError("subscription_not_found", subscription=name, topic=topic)
        return subscription

    def list_all(self, topic: str) -> list[pb.SubscriptionInfo]:
        self.registry.meta(topic)
        names = sorted(self._topics.get(topic, {}))
        return [self.describe(topic, name) for name in names]

    def describe(self, topic: str, name: str) -> pb.SubscriptionInfo:
        subscription = self._subscription(topic, name)
        spec = subscription.spec
        now = now_ms()
        info = pb.SubscriptionInfo(
            topic=topic, subscription=name, type=spec.type,  # type: ignore[arg-type]
            key_shared_mode=spec.mode,  # type: ignore[arg-type]
            filter=spec.key_filter(), max_redeliveries=spec.max_redeliveries,
            dead_letter_topic=spec.dead_letter_topic, created_ms=spec.created_ms)
        info.partitions.extend(partition_info(d, now, self.settings.waiting_slots_reported_max)
                               for d in subscription.dispatchers)
        return info

    async def seek(self, topic: str, name: str, position: pb.StartPosition,
                   partitions: list[int]) -> pb.SubscriptionInfo:
        """Move the cursor of the named partitions (all when empty): all of them or
        none, on disk (one write, even across a crash) and in what consumers are sent.

        Raises:
            BrokerError: the refusals below; store_failed (a disk failure: the broker
            stops) or seek_failed (any other failed write) when nothing moved.
        """
        subscription = self._subscription(topic, name)
        if position.WhichOneof("position") is None:
            raise BrokerError("start_invalid")
        indexes = sorted(set(partitions)) or list(range(subscription.meta.partitions))
        for index in indexes:
            if index >= subscription.meta.partitions:
                raise BrokerError("partition_out_of_range", partition=index, topic=topic,
                                  last=subscription.meta.partitions - 1)
        dispatchers = [subscription.dispatchers[i] for i in indexes]
        offsets = [d.partition.resolve_start(position, unset_is_latest=True) for d in dispatchers]
        async with self._create_lock:  # a delete of the topic waits for these writes
            self._live_meta(subscription.meta)
            if self._topics.get(topic, {}).get(name) is not subscription:
                raise BrokerError("subscription_deleted", subscription=name, topic=topic)
            try:
                await seek_together(self.store, dispatchers, offsets)  # one write: all or none
            except BrokerError:
                raise
            except Exception as e:  # nothing moved (`seek_together`, rule 1)
                log.warning("the seek of %s/%s failed, nothing moved: %s", topic, name, e)
                raise BrokerError("seek_failed", subscription=name, topic=topic,
                                  cause=describe_cause(e)) from e
        return self.describe(topic, name)

    async def delete(self, topic: str, name: str, force: bool) -> None:
        """Under the create lock, as `seek`: a seek's cursor write in flight lands
        first and is deleted with the subscription, never after it."""
        async with self._create_lock:
            subscription = self._subscription(topic, name)
            if subscription.sessions and not force:
                raise BrokerError("subscription_has_consumers", subscription=name, topic=topic,
                                  count=len(subscription.sessions))
            del self._topics[topic][name]
            await self._end(subscription, BrokerError("subscription_deleted", subscription=name,
                                                      topic=topic), persist=False)
            meta = subscription.meta
            await asyncio.to_thread(self.store.delete_subscription, meta.topic_id, name,
                                    meta.partitions)
        for gauge in (SUBSCRIPTION_BACKLOG, SUBSCRIPTION_UNACKED, SUBSCRIPTION_DISPATCH_RATE):
            with contextlib.suppress(KeyError):
                gauge.remove(topic, name)
        report_cycles(self._cycles, self._hops(), "subscription deleted")

    async def ensure(self, request: pb.SubscribeOpen, created_ms: int) -> bool:
        """Create the subscription an `open` describes if it is missing, with no
        consumer; True when created. Relay followers mirror their upstream's
        subscriptions with it (broker/relay/cursor_sync.py)."""
        meta = self.registry.meta(request.topic)
        asked = SubscriptionSpec.of_open(request, created_ms, self._default_mode)
        check_open(request, asked, self.settings)
        async with self._create_lock:
            meta = self._live_meta(meta)
            if request.subscription in self._topics.get(meta.name, {}):
                return False
            await self._save(self._new(asked, meta, request.initial_position))
            # unchecked (see `_check_cycle`): a copy may close a cycle with one made here
            report_cycles(self._cycles, self._hops(), f"closed by {quote(request.subscription)} "
                          f"on {quote(meta.name)}, copied by a relay follower")
        return True
