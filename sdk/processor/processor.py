"""EventProcessor: processors of one consumer group share a topic's partitions.

Kafka users know it as a consumer group, Event Hubs users as
`EventProcessorClient`. Every `load_balancing_interval_ms` (plus up to 20%
jitter, as Event Hubs) the processor lists the group's ownership, asks the
pure balancer (`balancer.py`) what to claim, sends the claims (renewals
included) as compare-and-sets, and then starts a pump (`pump.py`) for each
partition it newly won and stops the pump of each it no longer holds
(on_partition_close(reason="ownership_lost")). On stop it closes every
partition (reason "shutdown") and releases them (owner "") so others take
them within one interval instead of after the expiration.

Ownership and checkpoints are two stores (`sdk.stores`): by default both are
the broker's; ownership may be Redis (`RedisOwnershipStore`) and checkpoints
a directory (`FileCheckpointStore`). A failing cycle (store or broker
unreachable) is reported to on_error (each time) and retried next interval;
without on_error the log says it once per outage (`outages.py`), as it says
a partition's failure once per outage of that partition (its pump reopens
it every cycle); either way the log says when it works again. A lost broker
is one outage whoever sees it (the readers, the cycle, the lapsing claims):
one warning saying what it means for the partitions, one line when it is
back (`broker_outage.py`). The
partitions held keep running until their lease lapses by this machine's
clock (the last renewal sent + the expiration, `leases.py`): then a watch
task closes them ("ownership_lost") at once, event or not, even while a
cycle hangs on the store, so a processor cut off from the ownership store
stops processing, and stops calling them its own, before another can take
over. A claim won again later reopens from the checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any

import grpc.aio

from sdk import errors
from sdk.admin import Admin
from sdk.channel import open_channel
from sdk.processor import arguments
from sdk.processor.balancer import Group, Strategy, plan_claims
from sdk.processor.broker_outage import BrokerOutage, unreachable
from sdk.processor.context import CloseReason, PartitionContext, monotonic_ms
from sdk.processor.leases import lapsed_partitions, lease_lapsed, next_lapse_ms
from sdk.processor.metrics import ProcessorMetrics, ProcessorStats
from sdk.processor.offset_reset import OffsetReset, is_other_incarnation
from sdk.processor.outages import Line, OutageLog, PartitionOutages
from sdk.processor.own_writes import DuplicateOwnerId, OwnWrites
from sdk.processor.pump import Callbacks, PartitionPump, StartPositions
from sdk.processor.release import STOP_STORE_WAIT_S, release
from sdk.reader import ReadBatch, Reader, Start
from sdk.security import ClientSecurity
from sdk.stores.broker_stores import BrokerCheckpointStore, BrokerOwnershipStore
from sdk.stores.fencing import fences
from sdk.stores.protocols import CheckpointStore, OwnershipStore
from sdk.stores.records import PartitionOwnership

log = logging.getLogger("keybus.processor")
JITTER = 0.2


class EventProcessor:
    """Balance a topic's partitions among the processors of a consumer group.

    Args:
        broker: "host:port" of the broker to read from (and, by default, to
            keep ownership and checkpoints in).
        topic, consumer_group: what to process, and as which group
            (consumer group: 1..255 of [A-Za-z0-9._-]).
        on_event: on_event(context, batch) for each batch read (a ReadBatch:
            columns, `events()` for rows); sync or async; one partition's
            batches are handed over one at a time, in offset order.
        on_partition_initialize: on_partition_initialize(context) before the
            first batch of a claimed partition, once its reader is open: a
            "latest" start is fixed by then, so every event stored after
            this callback is delivered.
        on_partition_close: on_partition_close(context, reason), reason
            "shutdown", "ownership_lost" or "error".
        on_error: on_error(context or None, error): a failed callback
            (context set: the partition closes with "error" and reopens from
            its checkpoint next cycle) or a failed cycle (None), each time.
            Without it the log, once per outage: a WARNING when a kind of
            failure starts (of the cycle, or of a partition's step: starting,
            on_partition_initialize, reading, on_event, on_partition_close),
            DEBUG while it repeats. With or without it, an INFO when the
            cycle or step works again.
        ownership_store: an OwnershipStore (default: the broker's). One
            whose records expire by themselves says so with `ttl_ms`
            (RedisOwnershipStore): it must be >= ownership_expiration_ms.
        checkpoint_store: a CheckpointStore (default: the broker's).
        strategy: "greedy" (claim all it needs at once, default) or
            "balanced" (one partition per cycle).
        load_balancing_interval_ms: between cycles (default 10000).
        ownership_expiration_ms: a claim not renewed this long may be taken
            (default 60000; keep it several intervals).
        start: where a partition without a checkpoint starts: "earliest"
            (default), "latest", an offset, {"scn": n} (as Reader's and
            Consumer's start), or a dict partition -> one of those.
            "latest" is the log end when the partition's reader opens (when
            it is claimed), not when the processor was made or started.
        start_position: deprecated spelling of `start`.
        offset_reset: what a partition whose checkpoint is behind the log's
            start (retention removed the events after it) or past its end
            (the log was cut after it) does: "fail" (default: it does not
            start; CheckpointExpired, or CheckpointPastEnd, to on_error every
            cycle until the checkpoint moves), "earliest" (resume at the
            log's start) or "latest" (at its end). A reset is logged once at
            WARNING and shown as context.checkpoint_reset. "fail" because a
            skip cannot be undone: it must be asked for (Kafka's
            auto.offset.reset for an out-of-range offset; a partition
            without a checkpoint follows `start`). See offset_reset.py.
        namespace: groups deployments that share stores (default "").
        owner_id: this processor's id (default: a new UUID). Unique per
            running processor: one that finds records under its id written
            by another instance reports DuplicateOwnerId to on_error, closes
            its partitions and stops balancing.
        fencing: write the ownership epoch into checkpoints so the store
            refuses a stale owner. Default: on when the checkpoint store
            supports it (`supports_fencing`), off otherwise.
        events_max: events per read message (0: broker default).
        channel: a grpc.aio channel to share (not closed by stop()).
        security: TLS and credentials (sdk.security.ClientSecurity) for the
            channel it opens, which its reads and the broker-held ownership
            and checkpoint stores share; None = the ambient default, else
            plain text. Ignored when `channel` is given.
    Raises:
        ValueError: a bad argument, naming what is allowed: names by the
            broker's rules, an ownership store whose records live shorter
            (`ttl_ms`) than ownership_expiration_ms, a start out of range,
            an offset_reset other than "fail", "earliest" or "latest".
        TypeError: on_event missing or a callback that is not callable.
    """

    def __init__(self, broker: str, topic: str, consumer_group: str, *,
                 on_event: Callable[[PartitionContext, ReadBatch], Any],
                 on_partition_initialize: Callable[[PartitionContext], Any] | None = None,
                 on_partition_close: Callable[[PartitionContext, CloseReason], Any] | None = None,
                 on_error: Callable[[PartitionContext | None, BaseException], Any] | None = None,
                 ownership_store: OwnershipStore | None = None,
                 checkpoint_store: CheckpointStore | None = None,
                 strategy: Strategy = "greedy", load_balancing_interval_ms: int = 10_000,
                 ownership_expiration_ms: int = 60_000, start: StartPositions = "earliest",
                 namespace: str = "", owner_id: str | None = None, fencing: bool | None = None,
                 events_max: int = 0, channel: grpc.aio.Channel | None = None,
                 security: ClientSecurity | None = None, offset_reset: OffsetReset = "fail",
                 start_position: StartPositions | None = None) -> None:
        start = arguments.renamed_start(start, start_position)
        arguments.check_processor(
            topic, consumer_group, namespace, owner_id,
            {"on_event": on_event, "on_partition_initialize": on_partition_initialize,
             "on_partition_close": on_partition_close, "on_error": on_error},
            strategy, load_balancing_interval_ms, ownership_expiration_ms, ownership_store,
            checkpoint_store, start, events_max, fencing, offset_reset)
        self.broker = broker
        self.topic = topic
        self.consumer_group = consumer_group
        self.namespace = namespace
        self.owner_id = owner_id or str(uuid.uuid4())
        self.strategy: Strategy = strategy
        self.interval_ms = load_balancing_interval_ms
        self.expiration_ms = ownership_expiration_ms
        self._start_position = start
        self._offset_reset: OffsetReset = offset_reset
        self._log_starts: dict[int, int] = {}  # partition -> log start, at the last cycle
        self._log_ends: dict[int, int] = {}  # partition -> log end, as well
        self._incarnation = ""  # the topic's, at the last cycle ("" = not known)
        self._callbacks = Callbacks(on_event, on_partition_initialize, on_partition_close,
                                    on_error)
        self._ownership = ownership_store
        self._checkpoints = checkpoint_store
        self._fencing = fencing
        self._events_max = events_max
        self._channel = channel
        self._security = security
        self._owns_channel = channel is None
        self._owned_stores: list[Any] = []
        self._admin: Admin | None = None
        self._pumps: dict[int, PartitionPump] = {}
        self._held: dict[int, PartitionOwnership] = {}
        self._metrics = ProcessorMetrics(topic, consumer_group, self.owner_id)
        self._stopping = asyncio.Event()
        self._balancer: asyncio.Task[None] | None = None
        self._lease_watch: asyncio.Task[None] | None = None
        self._leases_changed = asyncio.Event()
        self._own_writes = OwnWrites(self.owner_id)
        self._duplicate: DuplicateOwnerId | None = None
        self._described = False  # a cycle found the topic: its absence now is its delete
        self._outage = OutageLog(f"event processor {topic}/{consumer_group}: balancing")
        self._broker_outage = BrokerOutage(f"event processor {topic}/{consumer_group}", broker,
                                           ownership_expiration_ms)
        self._calling_broker = False  # the cycle's call under way goes to the broker
        self._partition_outages = PartitionOutages(f"event processor {topic}/{consumer_group}")

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start balancing (the first cycle runs at once) and processing.

        Returns before any partition is claimed: to produce only once a
        "latest" start is fixed, wait for the partitions' on_partition_initialize."""
        if self._balancer is not None:
            raise RuntimeError("this EventProcessor was started already; make a new one")
        if self._channel is None:
            self._channel = open_channel(self.broker, self._security)
        timeout_ms = max(1_000, self.interval_ms)
        if self._ownership is None:
            self._ownership = BrokerOwnershipStore(self.broker, channel=self._channel,
                                                   request_timeout_ms=timeout_ms)
            self._owned_stores.append(self._ownership)
        if self._checkpoints is None:
            self._checkpoints = BrokerCheckpointStore(self.broker, channel=self._channel,
                                                      request_timeout_ms=timeout_ms)
            self._owned_stores.append(self._checkpoints)
        if self._fencing is None:
            self._fencing = fences(self._checkpoints)
        self._admin = Admin(self.broker, channel=self._channel, request_timeout_ms=timeout_ms)
        loop = asyncio.get_running_loop()
        self._balancer = loop.create_task(self._balance_loop())
        self._lease_watch = loop.create_task(self._watch_leases())

    async def stop(self) -> None:
        """Stop balancing, close every partition ("shutdown": callbacks in
        progress finish first) and release them. Idempotent.

        Bounded apart from the callbacks in progress: a cycle under way gets
        STOP_STORE_WAIT_S to finish, then is cancelled; the release gets as
        long again, then is given up with one WARNING (the claims expire
        after ownership_expiration_ms instead)."""
        if self._balancer is None or self._stopping.is_set():
            return
        self._stopping.set()
        await asyncio.wait({self._balancer}, timeout=STOP_STORE_WAIT_S)
        if not self._balancer.done():  # a cycle waits on a store: what it claims will expire
            self._balancer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._balancer
        if self._lease_watch is not None:
            self._lease_watch.cancel()  # it only waits or stops pumps: nothing to finish
            with contextlib.suppress(asyncio.CancelledError):
                await self._lease_watch
        pumps = list(self._pumps.values())
        for pump in pumps:
            pump.stop("shutdown")
        await asyncio.gather(*(pump.task for pump in pumps), return_exceptions=True)
        await self._release()
        self._metrics.owned(0)
        self._metrics.remove()
        for store in self._owned_stores:
            await store.close()
        if self._admin is not None:
            await self._admin.close()
        if self._owns_channel and self._channel is not None:
            await self._channel.close()

    async def __aenter__(self) -> EventProcessor:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()

    @property
    def owned_partitions(self) -> list[int]:
        """Partitions being processed now: claimed, the claim not lapsed by
        this machine's clock (leases.py), and not closing."""
        now_ms = monotonic_ms()
        return sorted(p for p, pump in self._pumps.items()
                      if not pump.stopping and not pump.context.lease_lapsed(now_ms))

    @property
    def stats(self) -> ProcessorStats:
        return self._metrics.stats

    # ------------------------------------------------------------ balancing

    async def _balance_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.balance_once()
            except DuplicateOwnerId as e:
                await self._cycle_failed(e)
                return  # balancing again would only fight the other instance
            except Exception as e:
                await self._cycle_failed(e)
            else:
                self._cycle_worked()
            delay_s = self.interval_ms / 1000 * (1 + JITTER * random.random())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay_s):
                    await self._stopping.wait()

    async def _cycle_failed(self, error: BaseException) -> None:
        """Every failure to on_error; without one, the log once per outage: the broker's
        (broker_outage.py, with what its readers said) or else the cycle's (outages.py)."""
        self._metrics.stats.balancing_errors += 1
        if self._calling_broker and unreachable(error):
            line = self._broker_outage.process_cycle_failed(error, self.owned_partitions,
                                                            time.monotonic())
        else:
            line = self._outage.failed(error, time.monotonic())
        await self._callbacks.error(None, error, line)

    def _stream_changed(self, connected: bool, message: str) -> None:
        """A partition's reader lost or reached the broker again (its
        on_connection_change): one account for every reader and the cycle."""
        now_s = time.monotonic()
        if connected:
            line = self._broker_outage.process_back(now_s) or Line(
                logging.DEBUG, f"event processor {self.topic}/{self.consumer_group}: {message}")
        else:
            line = self._broker_outage.process_stream_lost(message, self.owned_partitions, now_s)
        log.log(line.level, "%s", line.message)

    def _broker_answered(self) -> None:
        line = self._broker_outage.process_back(time.monotonic())
        if line is not None:
            log.log(line.level, "%s", line.message)

    def _cycle_worked(self) -> None:
        """After an outage, the log says the cycle works again (with or without
        on_error: no callback tells that, and on_error said only the failures)."""
        line = self._outage.worked(time.monotonic())
        if line is not None:
            log.log(line.level, "%s", line.message)

    async def balance_once(self) -> None:
        """One cycle: list, plan, claim, then start and stop pumps to match.

        Raises:
            DuplicateOwnerId: another running processor claims under this
                owner_id (own_writes.py); this one has closed every partition
                ("ownership_lost") and balances no more.
        """
        assert self._admin is not None and self._ownership is not None
        if self._duplicate is not None:
            raise self._duplicate
        self._calling_broker = True
        try:
            info = await self._admin.describe_topic(self.topic)
        except errors.KeybusError as e:
            raise errors.deleted_if_gone(e, self.topic) if self._described else e from None
        self._described = True
        self._log_starts = {p.partition: p.start_offset for p in info.partitions}
        self._log_ends = {p.partition: p.end_offset for p in info.partitions}
        self._incarnation = info.incarnation
        self._close_other_incarnation(info.incarnation)
        self._broker_answered()
        self._calling_broker = self._ownership in self._owned_stores  # the broker's own store
        listed = await self._ownership.list_ownership(self.namespace, self.topic,
                                                      self.consumer_group)
        self._duplicate = self._own_writes.check(listed)
        if self._duplicate is not None:
            self._give_up()
            raise self._duplicate
        group = Group(self.namespace, self.topic, self.consumer_group, self.owner_id)
        plan = plan_claims(group, len(info.partitions), listed, time.time_ns() // 1_000_000,
                           self.expiration_ms, self.strategy, random.getrandbits(64))
        claimed_at_ms = monotonic_ms()  # the lease counts from the send (leases.py)
        try:
            won = await self._ownership.claim_ownership(plan.claims) if plan.claims else []
        except Exception:
            self._own_writes.unsure(claim.partition for claim in plan.claims)
            raise
        mine = {o.partition: o for o in won if o.owner_id == self.owner_id}
        self._own_writes.wrote(mine.values())
        self._own_writes.unsure(claim.partition for claim in plan.claims
                                if claim.partition not in mine)
        self._metrics.cycle(len(plan.claims), len(won), plan.stolen in mine)
        self._apply(mine, claimed_at_ms)

    def _close_other_incarnation(self, incarnation: str) -> None:
        """Close the partitions opened on a topic since deleted and created again;
        this cycle starts them anew from their checkpoints (offset_reset.py decides)."""
        stale = sorted(p for p, pump in self._pumps.items() if not pump.stopping
                       and is_other_incarnation(pump.context.incarnation, incarnation))
        for partition in stale:
            self._pumps[partition].stop("error")
        if stale:
            log.warning("event processor %s/%s: the topic was deleted and created again (now "
                        "incarnation %r); closing partitions %s to start them anew on it",
                        self.topic, self.consumer_group, incarnation, stale)

    def _apply(self, mine: dict[int, PartitionOwnership], claimed_at_ms: int) -> None:
        """Stop pumps of partitions lost (or won again under a new epoch) or
        whose claim lapsed before this answer, renew the rest, start pumps for
        partitions newly won (or won again after a lapse) unless the claim
        itself has lapsed already (the call outlasted the expiration)."""
        now_ms = monotonic_ms()
        self._close_lapsed(now_ms)
        for partition, pump in list(self._pumps.items()):
            record = mine.get(partition)
            if pump.stopping:
                continue
            if record is None or record.epoch != pump.context.epoch:
                pump.stop("ownership_lost")
            else:
                pump.context.renewed(record, claimed_at_ms)
        fresh = not lease_lapsed(claimed_at_ms, self.expiration_ms, now_ms)
        for partition, record in mine.items():
            running = self._pumps.get(partition)
            if fresh and (running is None or running.stopping):
                self._start_pump(record, claimed_at_ms, running)
        self._held = mine
        self._partition_outages.keep(mine)
        self._metrics.owned(len(self.owned_partitions))
        self._leases_changed.set()

    async def _watch_leases(self) -> None:
        """Close each partition when its claim lapses (leases.py), event or
        not, even while a cycle waits on an unreachable store. Wakes at the
        next lapse, or when a cycle renewed or started claims."""
        while not self._stopping.is_set():
            self._leases_changed.clear()
            now_ms = monotonic_ms()
            self._close_lapsed(now_ms)
            lapse_ms = next_lapse_ms(self._renewals(), self.expiration_ms)
            wait_ms = self.interval_ms if lapse_ms is None else max(1, lapse_ms - now_ms)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_ms / 1000):
                    await self._leases_changed.wait()

    def _renewals(self) -> dict[int, int]:
        """partition -> when its claim was last sent, for the pumps not closing."""
        return {p: pump.context.renewed_at_ms for p, pump in self._pumps.items()
                if not pump.stopping}

    def _close_lapsed(self, now_ms: int) -> None:
        """Stop the pumps whose claim lapsed at now_ms ("ownership_lost": the
        close callback follows once the pump ends, a callback in progress first)."""
        lapsed = lapsed_partitions(self._renewals(), self.expiration_ms, now_ms)
        if not lapsed:
            return
        quiet = self._broker_outage.down  # its warning said the claims would lapse
        for partition in lapsed:
            self._pumps[partition].stop("ownership_lost", quiet=quiet)
        self._metrics.lapsed(len(lapsed))
        self._metrics.owned(len(self.owned_partitions))
        if quiet:
            line = self._broker_outage.process_lapsed(lapsed)
            log.log(line.level, "%s", line.message)
            return
        log.warning("event processor %s/%s: the claims of partitions %s lapsed (not renewed "
                    "within ownership_expiration_ms=%d, e.g. the ownership store is "
                    "unreachable); closing them until a claim is won again", self.topic,
                    self.consumer_group, list(lapsed), self.expiration_ms)

    def _give_up(self) -> None:
        """Another instance uses this owner_id: close every partition and keep
        no record to release (those records are the other instance's too)."""
        for pump in self._pumps.values():
            pump.stop("ownership_lost")
        self._held = {}
        self._partition_outages.keep(())
        self._metrics.owned(0)

    def _start_pump(self, record: PartitionOwnership, claimed_at_ms: int,
                    previous: PartitionPump | None) -> None:
        assert self._checkpoints is not None
        context = PartitionContext(record, self._checkpoints, bool(self._fencing), self._metrics,
                                   self.expiration_ms, claimed_at_ms, self._incarnation)
        pump = PartitionPump(context, self._checkpoints, bool(self._fencing),
                             self._start_position, self._callbacks, self._open_reader,
                             self._metrics.events, self._partition_outages,
                             previous.task if previous else None, offset_reset=self._offset_reset,
                             log_start_offset=self._log_starts.get(record.partition),
                             log_end_offset=self._log_ends.get(record.partition),
                             broker_away=lambda p, step, e: self._broker_outage.process_partition_failed(
                                 p, step, e, self._checkpoints in self._owned_stores,
                                 self.owned_partitions, time.monotonic()))
        self._pumps[record.partition] = pump
        pump.task.add_done_callback(lambda _: self._forget(pump))

    def _forget(self, pump: PartitionPump) -> None:
        if self._pumps.get(pump.context.partition) is pump:
            del self._pumps[pump.context.partition]
            self._metrics.owned(len(self.owned_partitions))

    def _open_reader(self, partition: int, start: Start) -> Reader:
        return Reader(self.broker, self.topic, partition, start=start, follow=True,
                      events_max=self._events_max, channel=self._channel,
                      on_connection_change=self._stream_changed, incarnation=self._incarnation or None)

    async def _release(self) -> None:
        """Give back what this processor held (release.py)."""
        held, self._held = self._held, {}
        if self._ownership is not None:
            await release(self._ownership, held,
                          f"event processor {self.topic}/{self.consumer_group}",
                          self.expiration_ms, self._callbacks)
