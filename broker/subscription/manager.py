"""Subscriptions of every topic: create, attach consumers, route acks, admin.

Job: the registry of subscriptions and the one entry point the servicers
call. A subscription has one `PartitionDispatcher` per partition, each with
its durable cursor (RocksDB family `cursors`, see `codec.py`). A
subscription is created by its first consumer, with its cursor at the
initial position (earliest, latest, offset or SCN; default latest, as
Pulsar) written synchronously together with its settings, so it exists on
disk before anything is delivered. It lives until deleted (or its topic is).

Everything here runs on the event loop. Consumer calls (`grant`, `ack`,
`nack`) validate, then call the dispatcher of the named partition, which
never awaits; admin calls that write (`seek`, `delete`) await the store.
The admin calls (list, describe, seek, delete, ensure) are in
`manager_admin.py`, a base class of `SubscriptionManager`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Mapping

from broker.config import Settings
from broker.errors import BrokerError
from broker.filtering import compile_selector
from broker.log.rocks_store import RocksStore
from broker.metrics import CONSUMER_OUTBOX_BYTES, DEAD_LETTERED_EVENTS, DISPATCH_CACHE_BYTES
from broker.partition import TopicMeta, now_ms
from broker.subscription.cache_budget import CacheBudget
from broker.subscription.consumer_state import Session
from broker.subscription.cursor import Cursor
from broker.subscription.dead_letter_cycle import Hop, by_topic, cycle_text, find_cycle
from broker.subscription.dead_letter_watch import CycleWatch, report_cycles
from broker.subscription.dispatcher import PartitionDispatcher
from broker.subscription.dispatcher_upkeep import ForwardsDeadLetters
from broker.subscription.manager_admin import ManagerAdmin, Subscription
from broker.subscription.open_rules import check_open, check_room, check_sticky, consumer_spec
from broker.subscription.outbox_budget import OutboxBudget
from broker.subscription.ranges import checked_ranges, sent_ranges
from broker.subscription.spec import SubscriptionSpec, mode_named
from broker.subscription.stats import remove_consumer_gauges, update_gauges
from broker.topics import TopicRegistry
from sdk.consumer_config import MODES
from sdk.core.filters import KeyFilterSpec
from sdk.core.hashing import SLOT_MAX
from sdk.core.pb import keybus_pb2 as pb

log = logging.getLogger("keybus.subscriptions")
METRICS_INTERVAL_S = 1.0


class SubscriptionManager(ManagerAdmin):
    """See the module docstring."""

    def __init__(self, registry: TopicRegistry, store: RocksStore, settings: Settings,
                 config_filters: Mapping[str, KeyFilterSpec]) -> None:
        self.registry = registry
        self.store = store
        self.settings = settings
        self.config_filters = config_filters
        self._default_mode = MODES[settings.key_shared_default_mode]
        self._topics: dict[str, dict[str, Subscription]] = {}
        self._create_lock = asyncio.Lock()
        self._cycles = CycleWatch()
        self._metrics_task: asyncio.Task[None] | None = None
        # set by the server when relay chaining may make this broker a follower
        self.dead_letter_forwarder: ForwardsDeadLetters | None = None
        self.cache_budget = CacheBudget(settings.dispatch_cache_broker_bytes_max,
                                        settings.dispatch_cache_bytes_max)
        # the consumers' outboxes: a share is never below one event of the largest size
        self.outbox_budget = OutboxBudget(settings.consumer_outbox_broker_bytes_max,
                                         settings.consumer_outbox_bytes_max,
                                         settings.event_bytes_max)

    # ------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        """Load every subscription of every topic and start its dispatchers."""
        for topic in self.registry.names():
            meta = self.registry.meta(topic)
            for raw in self.store.load_subscriptions(meta.topic_id):
                self._start(SubscriptionSpec.from_dict(raw), meta)
        report_cycles(self._cycles, self._hops(), "found at start")
        self._metrics_task = asyncio.get_running_loop().create_task(self._metrics_loop())

    def _start(self, spec: SubscriptionSpec, meta: TopicMeta) -> Subscription:
        """Build a loaded subscription from its stored cursors, register and start it."""
        cursors = {}
        for partition in self.registry.partitions(meta.name):
            data = self.store.get_cursor(meta.topic_id, partition.index, spec.name)
            cursors[partition.index] = Cursor.from_bytes(data) if data else \
                Cursor(partition.start_offset)
        return self._register(self._build(spec, meta, cursors))

    def _build(self, spec: SubscriptionSpec, meta: TopicMeta,
               cursors: dict[int, Cursor]) -> Subscription:
        """A subscription's objects, not registered, nothing started."""
        selector = compile_selector(spec.key_filter(), self.config_filters)
        dispatchers = [PartitionDispatcher(spec, partition, self.store, self.settings,
                                           cursors[partition.index], selector, self._dead_letter,
                                           self.cache_budget)
                       for partition in self.registry.partitions(meta.name)]
        return Subscription(spec, meta, dispatchers)

    def _register(self, subscription: Subscription) -> Subscription:
        self._topics.setdefault(subscription.meta.name, {})[subscription.spec.name] = subscription
        for dispatcher in subscription.dispatchers:
            dispatcher.start()
        self.cache_budget.join_all((d.cache, d.wake) for d in subscription.dispatchers)
        return subscription

    async def close(self) -> None:
        """End every stream (UNAVAILABLE) and write every changed cursor."""
        if self._metrics_task is not None:
            self._metrics_task.cancel()
        for topic in list(self._topics):
            for subscription in list(self._topics[topic].values()):
                await self._end(subscription, BrokerError("shutting_down"), persist=True)
        self._topics.clear()

    async def _end(self, subscription: Subscription, error: BrokerError, persist: bool) -> None:
        for session in list(subscription.sessions.values()):
            session.close(error)
            session.leave_budget()
        for dispatcher in subscription.dispatchers:
            self.cache_budget.leave(dispatcher.cache)
            await dispatcher.stop(persist=persist)
        for name in subscription.sessions:
            remove_consumer_gauges(subscription.spec.topic, subscription.spec.name, name)

    async def drop_topic(self, topic: str) -> None:
        """The topic was deleted: its subscriptions go too (their keys go with it).

        A delete listener (`TopicRegistry.delete`), under the create lock: a
        subscription's creation or a seek writing now finishes first; one that
        comes after finds the topic gone (`_live_meta`). Either way nothing
        writes keys of the topic after they are deleted."""
        async with self._create_lock:
            dropped = self._topics.pop(topic, {})
        for subscription in dropped.values():
            await self._end(subscription, BrokerError("topic_deleted", topic=topic), persist=False)
        report_cycles(self._cycles, self._hops(), "topic deleted")

    # ------------------------------------------------------------ consumers

    async def attach(self, request: pb.SubscribeOpen) -> Session:
        """Validate an `open` whole, create the subscription if new, attach the consumer.

        Everything that could refuse the consumer is checked before anything is
        created or changed: a refused first consumer leaves no subscription behind.

        Raises:
            BrokerError: every refusal of the catalogue's subscription section.
        """
        meta = self.registry.meta(request.topic)
        spec = consumer_spec(request, meta, self.settings)
        asked = SubscriptionSpec.of_open(request, now_ms(), self._default_mode)
        check_open(request, asked, self.settings)
        async with self._create_lock:
            meta = self._live_meta(meta)
            subscription = self._topics.get(meta.name, {}).get(request.subscription)
            if subscription is not None and not mode_named(request) and \
                    asked.type == subscription.spec.type:
                asked = dataclasses.replace(asked, mode=subscription.spec.mode)
            check_sticky(request, asked)
            created = subscription is None
            if subscription is None:
                self._check_cycle(asked)
                subscription = self._new(asked, meta, request.initial_position)
            subscription.spec.check_compatible(asked, spec.name)
            check_room(subscription.spec, subscription.sessions, spec.name, self.settings)
            session = Session(spec, meta.name, subscription.spec.name,
                              self.settings.consumer_outbox_messages_max,
                              self.settings.consumer_outbox_bytes_max, self.outbox_budget)
            now = now_ms()
            for index in spec.partitions:
                subscription.dispatchers[index].check_attach(session, now)
            if created:
                await self._save(subscription)
            for index in spec.partitions:
                subscription.dispatchers[index].attach(session, now)
            subscription.sessions[spec.name] = session
            self.outbox_budget.join_all([(session, session.share_changed)])
        return session

    def _live_meta(self, meta: TopicMeta) -> TopicMeta:
        """The topic read before waiting for the create lock, if it still is the
        registry's: a delete that began meanwhile (the registry drops the topic
        first) waits for that lock in `drop_topic`, so a subscription made now
        would be written under an id whose keys are being deleted, or under the
        old id of a topic made again under its name.

        Raises:
            BrokerError: topic_deleted.
        """
        try:
            live = self.registry.meta(meta.name)
        except BrokerError:
            live = None
        if live is None or live.topic_id != meta.topic_id:
            raise BrokerError("topic_deleted", topic=meta.name)
        return meta

    def _check_cycle(self, asked: SubscriptionSpec) -> None:
        """Refuse a new subscription whose dead-letter chain, through this broker's
        subscriptions, leads back to its own topic. Called under the create lock, so
        two opens cannot close a cycle between them. Not by `ensure`: a follower
        copies its upstream's subscriptions as they are (checked there when made); a
        cycle such a copy closes is reported, not refused (`dead_letter_watch.py`).

        Raises:
            BrokerError: dead_letter_cycle.
        """
        new = Hop(asked.topic, asked.name, asked.dead_letter_topic)
        cycle = find_cycle(new, by_topic(self._hops()))
        if cycle is not None:
            raise BrokerError("dead_letter_cycle", subscription=asked.name, topic=asked.topic,
                              cycle=cycle_text(cycle))

    def _hops(self) -> list[Hop]:
        """Every subscription's dead-letter hop (those without a dead-letter topic too)."""
        return [Hop(topic, name, sub.spec.dead_letter_topic)
                for topic, subs in self._topics.items() for name, sub in subs.items()]

    def _new(self, spec: SubscriptionSpec, meta: TopicMeta,
             start: pb.StartPosition) -> Subscription:
        """A new subscription at its initial position, in memory only (see `_save`)."""
        existing = self._topics.get(meta.name, {})
        if len(existing) >= self.settings.subscriptions_per_topic_max:
            raise BrokerError("too_many_subscriptions", topic=meta.name, count=len(existing),
                              max=self.settings.subscriptions_per_topic_max)
        cursors = {p.index: Cursor(p.resolve_start(start, unset_is_latest=True))
                   for p in self.registry.partitions(meta.name)}
        return self._build(spec, meta, cursors)

    async def _save(self, subscription: Subscription) -> None:
        """Write a new subscription's settings and cursors (one synced batch), then
        register and start it. Under the create lock: a delete of the topic that
        began during the write has its keys deleted once the lock is free
        (`drop_topic`), these with them; the subscription is refused, not started
        on the stopped partitions."""
        spec, meta = subscription.spec, subscription.meta
        cursors = {d.index: d.core.snapshot().to_bytes() for d in subscription.dispatchers}
        await asyncio.to_thread(self.store.save_subscription, meta.topic_id, spec.name,
                                spec.to_dict(), cursors)
        self._live_meta(meta)
        log.info("created subscription %s on %s (%s)", spec.name, meta.name, spec.type_text)
        self._register(subscription)

    def spec_of(self, session: Session) -> SubscriptionSpec:
        subscription = self._topics.get(session.topic, {}).get(session.subscription)
        if subscription is None:
            raise BrokerError("subscription_deleted", subscription=session.subscription,
                              topic=session.topic)
        return subscription.spec

    def detach(self, session: Session) -> int:
        """The consumer's stream ended: its unacked events go back for redelivery.
        Returns how many events it held unacknowledged."""
        session.leave_budget()
        subscription = self._topics.get(session.topic, {}).get(session.subscription)
        if subscription is None or subscription.sessions.get(session.name) is not session:
            return 0
        del subscription.sessions[session.name]
        now = now_ms()
        held = sum(subscription.dispatchers[index].detach(session.name, now)
                   for index in session.spec.partitions)
        remove_consumer_gauges(session.topic, session.subscription, session.name)
        return held

    def _dispatcher(self, session: Session, partition: int, what: str) -> PartitionDispatcher:
        subscription = self._topics.get(session.topic, {}).get(session.subscription)
        if subscription is None:
            if session.topic not in self.registry.names():  # its delete ends this stream
                raise BrokerError("topic_deleted", topic=session.topic)
            raise BrokerError("subscription_deleted", subscription=session.subscription,
                              topic=session.topic)
        if partition not in session.spec.partitions:
            raise BrokerError("partition_not_subscribed", what=what, partition=partition,
                              subscribed=list(session.spec.partitions))
        return subscription.dispatchers[partition]

    def grant(self, session: Session, permits: pb.Permits) -> None:
        self._dispatcher(session, permits.partition, "permits").grant(session.name, permits.count)

    def ack(self, session: Session, ack: pb.Ack) -> None:
        dispatcher = self._dispatcher(session, ack.partition, "ack")
        if ack.cumulative:
            if dispatcher.spec.type in (pb.SHARED, pb.KEY_SHARED):
                raise BrokerError("ack_invalid", what="ack", detail="cumulative acks are for "
                                  "exclusive and failover subscriptions; acknowledge ranges")
            if len(ack.ranges) != 1 or ack.bounds or ack.sent_ranges:
                raise BrokerError("ack_invalid", what="ack", detail="a cumulative ack carries "
                                  "one range whose stop is the first offset not acknowledged")
            stop = ack.ranges[0].stop
            if stop > dispatcher.partition.log_end:
                raise BrokerError("ack_invalid", what="ack", detail=(
                    f"cumulative stop {stop} of partition {dispatcher.index} is past its end "
                    f"offset {dispatcher.partition.log_end}"))
            dispatcher.ack_cumulative(session.name, stop)
            return
        # The log end, not the high watermark: a restarted broker of a cluster holds
        # readers back while acks of what it delivered before may still come.
        end = dispatcher.partition.log_end
        if ack.sent_ranges:
            dispatcher.ack_sent(session.name, *sent_ranges(ack.sent_ranges, end,
                                                           dispatcher.index))
            if not (ack.ranges or ack.bounds):
                return
        starts, stops = checked_ranges(ack.ranges, ack.bounds, end, dispatcher.index, "ack")
        dispatcher.ack(session.name, starts, stops)

    def nack(self, session: Session, nack: pb.Nack) -> None:
        session.nacks_seen += 1
        dispatcher = self._dispatcher(session, nack.partition, "nack")
        delay = nack.delay_ms or self.settings.nack_delay_ms_default
        if delay > self.settings.nack_delay_ms_max:
            raise BrokerError("subscribe_limit_invalid", field="nack.delay_ms", value=delay,
                              allowed=f"0 (broker default) or 1..{self.settings.nack_delay_ms_max}")
        starts, stops = checked_ranges(nack.ranges, nack.bounds, dispatcher.partition.log_end,
                                       dispatcher.index, "nack")
        rest = nack.rest_of_slots
        if len(rest) % 2:
            raise BrokerError("ack_invalid", what="nack", detail=(
                f"rest_of_slots holds {len(rest)} numbers; it holds slot, offset pairs"))
        pairs = dict(zip(rest[0::2], rest[1::2], strict=True))
        if any(slot > SLOT_MAX for slot in pairs):
            raise BrokerError("ack_invalid", what="nack", detail=(
                f"rest_of_slots names a slot above {SLOT_MAX}"))
        dispatcher.nack(session.name, starts, stops, delay, now_ms(), pairs)

    # ------------------------------------------------------------ dead letters

    async def _dead_letter(self, spec: SubscriptionSpec, records: list[bytes]) -> None:
        """Append events that kept failing to the subscription's dead-letter topic
        (created with one partition when missing); on its leader when this broker
        only copies it (`broker/relay/dead_letter_forward.py`). Returns once durable
        there: the caller acknowledges the events after, and redelivers on a raise."""
        topic = spec.dead_letter_topic
        if topic not in self.registry.names():
            with contextlib.suppress(BrokerError):
                await self.registry.create(topic, pb.TopicConfig(partitions=1))
        partitions = self.registry.meta(topic).partitions
        requests = []
        for body in records:
            batch = pb.Record.FromString(body).batch
            slot = batch.slots[0] if batch.slots else 0
            requests.append(pb.ProduceRequest(topic=topic, partition=slot % partitions, batch=batch))
        forwarder = self.dead_letter_forwarder
        leader = forwarder.leader_of(topic) if forwarder is not None else None
        if forwarder is not None and leader is not None:  # a copied topic: its leader writes
            stored = await forwarder.write(leader, requests)
        else:
            results = await asyncio.gather(*(self.registry.partition(topic, r.partition).submit(r)
                                              for r in requests))
            stored = sum(r.count for r in results)
        DEAD_LETTERED_EVENTS.labels(spec.topic, spec.name).inc(stored)

    # ------------------------------------------------------------ metrics

    async def _metrics_loop(self) -> None:
        while True:
            await asyncio.sleep(METRICS_INTERVAL_S)
            try:
                self._update_metrics()
            except Exception:
                log.exception("updating subscription metrics failed; will retry")

    def _update_metrics(self) -> None:
        now = now_ms()
        DISPATCH_CACHE_BYTES.set(self.cache_budget.held())
        CONSUMER_OUTBOX_BYTES.set(self.outbox_budget.held())
        for topic, subscriptions in self._topics.items():
            for name, subscription in subscriptions.items():
                update_gauges(topic, name, subscription.dispatchers, now)
