"""The task that runs one subscription on one partition: the shell around its core.

The core (`core.py`) decides everything; this task only moves bytes: each
round it lets time pass in the core (`process_tick`), reads what the core
asks for on a worker thread (`log_reader.py`) and hands it back
(`process_read`), sends what the core decided (`delivery.py` assembles the
messages from stored record bytes, within `delivery_bytes_max`), appends
dead letters, and writes the cursor when it changed, at most every
`cursor_persist_interval_ms`. It reads only up to the partition's durable
`end_offset`.

Consumer calls (`attach`, `detach`, `grant`, `ack`, `nack`: the base class in
`dispatcher_consumers.py`) come from the subscription manager on the same
event loop, go straight to the core and wake the task; they never await, so
they are atomic with respect to a round and need no lock (a seek writes the
cursors of every partition it names in one write, then moves their cores in
one step: `dispatcher_upkeep.seek_together`). A commit runs the round itself,
without awaiting, while the task waits for a wake (`_round_now`), so following
the tail its deliveries are queued in the commit's own step; background writes
are `dispatcher_upkeep.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import numpy as np

from broker.config import Settings
from broker.errors import PARTITION_CLOSED, BrokerError
from broker.log.rocks_store import RocksStore
from broker.metrics import DISPATCHED_EVENTS, REDELIVERED_EVENTS
from broker.partition import Partition, now_ms
from broker.read_path import EventSelector
from broker.subscription.array_ops import distinct
from broker.subscription.cache_budget import CacheBudget
from broker.subscription.consumer_state import Session
from broker.subscription.core import CoreLimits, Kind, PartitionCore, ReadRequest
from broker.subscription.core_types import ReadResult, Send
from broker.subscription.cursor import Cursor, runs_of
from broker.subscription.delivery import CachedRecord, RecordCache, delivery_messages
from broker.subscription.dispatcher_consumers import DispatcherConsumers
from broker.subscription.dispatcher_supervision import DispatcherSupervision
from broker.subscription.dispatcher_upkeep import DeadLetterSink, DispatcherUpkeep
from broker.subscription.holdings import Taken
from broker.subscription.log_reader import read_events, read_events_in, read_records_holding
from broker.subscription.share_ends import open_windows
from broker.subscription.spec import SubscriptionSpec
from sdk.core.pb import keybus_pb2 as pb

log = logging.getLogger("keybus.dispatch")


class PartitionDispatcher(DispatcherConsumers, DispatcherUpkeep):
    """One subscription on one partition; see the module docstring."""

    def __init__(self, spec: SubscriptionSpec, partition: Partition, store: RocksStore,
                 settings: Settings, cursor: Cursor, selector: EventSelector | None,
                 dead_letter: DeadLetterSink, cache_budget: CacheBudget | None = None) -> None:
        self.spec = spec
        self.partition = partition
        self.index = partition.index
        self.store = store
        self.settings = settings
        self.selector = selector
        self.core = PartitionCore(spec.type, spec.mode, partition.index,
                                  CoreLimits.of(settings, spec), cursor, now_ms())
        self.sessions: dict[str, Session] = {}
        self.cache = RecordCache(settings.dispatch_cache_bytes_max, cache_budget)
        self.persisted_mark_delete = cursor.mark_delete
        self.persisted_acked_ranges = cursor.acked_range_count()
        self._dead_letter_sink = dead_letter
        self._last_persist_ms = 0
        self._wake = asyncio.Event()
        self._dead_letter_task: asyncio.Task[None] | None = None
        self._persist_task: asyncio.Task[None] | None = None  # a cursor write in flight
        self._cache_floor = -1  # the cache may drop records below this (persisted)
        self._task: asyncio.Task[None] | None = None
        self.closed = False
        # the metrics' children, looked up once (a `labels` call costs microseconds a send)
        self._dispatched = DISPATCHED_EVENTS.labels(spec.topic, spec.name)
        self._redelivered = REDELIVERED_EVENTS.labels(spec.topic, spec.name)
        self._sent_counts = [0, 0]  # (dispatched, redelivered) not yet in the metrics
        self._idle_clean = False  # the round idles with a clean cursor (see `_idle`)
        self._timer: asyncio.Handle | None = None  # wakes an idle round (see `_arm`)
        self._timer_due = 0.0  # when it fires (loop time)
        self._parked = False  # the task waits in `_idle` (see `_round_now`)
        self._unsent: list[tuple[Send, int]] = []  # decided sends, their records not cached
        self._deferred_read: ReadRequest | None = None  # taken by `_round_now` for the task
        self._failure: Exception | None = None  # raised in `_round_now`, for the task
        self.supervision = DispatcherSupervision(self)  # restarts it after a failure

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.partition.listeners.add(self._on_durable)
        self._task = asyncio.get_running_loop().create_task(
            self.supervision.run(self._run),
            name=f"dispatch {self.spec.topic}/{self.index}/{self.spec.name}")

    async def stop(self, persist: bool = True) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.partition.listeners.discard(self._on_durable)
        for task in (self._task, self._dead_letter_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, BrokerError):
                    await task
        await self._persist_settled()
        if persist and self.core.dirty:
            with contextlib.suppress(Exception):
                await self._persist(now_ms())

    def wake(self) -> None:
        self._wake.set()

    def _on_durable(self) -> None:
        """The partition's durable end moved (runs in its commit, before the producers'
        answers: on the partition's task, or in the fsync's callback). If a consumer
        could take something, run the round here and now (`_round_now`), or else wake
        the task's round: no timer and no task of its own sits between the commit and
        the delivery."""
        if self.partition.closed:
            self._wake.set()  # the round ends with topic_deleted
            return
        if not self._has_demand():
            return
        # a woken task already has a round coming: it sees this commit too
        ran_now = self._parked and not self._wake.is_set() and self._round_now()
        if not ran_now:
            self._wake.set()

    def _round_now(self) -> bool:
        """The round, run without awaiting by the caller (the commit) while this task is
        parked in `_idle` (no round is half done). Why: a woken task runs after what
        the loop already has queued, grpcio's write completions of earlier answers and
        deliveries among them (about 0.1 ms following the tail at 10,000 events/s).

        It does what `_round` does when the records of the core's sends are cached and
        its read lies in the partition's recent records. Whether it finished: if not, a
        send or read it took waits for the task's round (`_unsent`, `_deferred_read`),
        which the caller wakes. A failure is raised by the task's round, so its
        supervision ends the streams and restarts, as for any failed round."""
        try:
            core = self.core
            now = now_ms()
            core.process_tick(now)
            core.dispatch(now)
            if not self._carry_out_held():
                return False
            request = core.next_read(self.partition.end_offset)
            if request is not None:
                if not self._read_recent(request):
                    self._deferred_read = request
                    return False
                if not self._carry_out_held():
                    return False
            self._end_round()
            if request is not None and not core.read_all(self.partition.end_offset):
                return False
            self._arm(self._timeout_s())  # as `_idle` would before parking again
            self._idle_clean = not core.dirty
            return True
        except Exception as e:
            self._failure = e
            return False

    async def _run(self) -> None:
        try:
            while not self.closed:
                if not await self._round():
                    # a round that did not wait for a wake: let acks and permits queued
                    # meanwhile land first (after a wait they already have, and the
                    # wake goes straight to its round)
                    await asyncio.sleep(0)
        except BrokerError as e:
            if e.kind.name not in PARTITION_CLOSED:  # a damaged store: supervision reports it
                raise
            self.closed = True  # the topic was deleted under us: the manager ends the streams
        # anything else: self.supervision ends the streams with the cause and restarts

    async def _round(self) -> bool:
        """Tick, send what waits, read what the core asks for, persist; idle when done.
        Whether it waited for a wake at the end."""
        self._wake.clear()
        if self._failure is not None:  # in `_round_now`
            failure, self._failure = self._failure, None
            raise failure
        core = self.core
        now = now_ms()
        core.process_tick(now)
        core.dispatch(now)
        await self._carry_out()
        request, self._deferred_read = self._deferred_read, None
        if request is None:
            request = core.next_read(self.partition.end_offset)
        if request is not None:
            await self._read(request)
            await self._carry_out()
        self._end_round()
        # Following the tail, a read reaches the durable end and leaves nothing to read
        # again: idle now rather than after a round that would find nothing (whatever
        # changed since this round began set the wake, so the wait returns at once).
        if request is None or core.read_all(self.partition.end_offset):
            return await self._idle()
        return False

    def _end_round(self) -> None:
        """Persist the cursor when due, start dead letters."""
        if self.core.dirty and now_ms() - self._last_persist_ms >= \
                self.settings.cursor_persist_interval_ms:
            self._persist_in_background(now_ms())
        self._start_dead_letters()

    async def _read(self, request: ReadRequest) -> None:
        if self._read_recent(request):
            return
        records, result = await asyncio.to_thread(
            read_events, self.store, self.partition.meta.topic_id, self.index, request,
            self.selector, min(self.settings.dispatch_read_bytes_max, self.cache.limit()))
        if not self.closed:
            self._take_read(request, records, result)

    def _read_recent(self, request: ReadRequest) -> bool:
        """The read, when the partition's recent records hold it (following the tail:
        in memory, no thread); False: it needs the store."""
        recent = self.partition.recent.covering(request.start, request.stop)
        if recent is None:
            return False
        self._take_read(request, *read_events_in(recent, request, self.selector,
                                                 self.settings.dispatch_read_bytes_max))
        return True

    def _take_read(self, request: ReadRequest, records: list[CachedRecord],
                   result: ReadResult) -> None:
        for record in records:
            self.cache.add(record)
        self.core.process_read(request, result, now_ms())

    async def _idle(self) -> bool:
        """Wait for a wake (consumer calls; the partition's durable end moving, through
        `_on_durable`) or a timer (ack timeouts, nack delays, the cursor's persist).
        Whether it waited (not when the log grew while the round awaited)."""
        if self.partition.closed:
            raise BrokerError("topic_deleted", topic=self.partition.meta.name)
        if self._has_demand() and self.core.position < self.partition.end_offset:
            return False  # the log grew while the round awaited
        self._arm(self._timeout_s())
        # a clean cursor: no persist timer runs, so an ack must wake it (`_ack_wakes`)
        self._idle_clean = not self.core.dirty
        self._parked = True  # `_round_now` may run rounds meanwhile
        try:
            await self._wake.wait()
        finally:
            self._idle_clean = self._parked = False
        return True

    def _arm(self, timeout_s: float | None) -> None:
        """Have the round woken within `timeout_s` (None: no timer is needed). One timer
        is kept across rounds and moved only when it would fire too late: following the
        tail, round after round idles until the same persist time, and a timeout per wait
        would schedule and cancel a timer each round. A timer firing early costs a round
        that finds nothing to do. Deadlines are whole milliseconds (`now_ms`), so one
        that comes back a fraction of a millisecond sooner keeps the timer. Its due
        time is kept here, not asked of the handle: uvloop runs a call_at due within
        half a millisecond as call_soon, whose Handle has no when()."""
        if timeout_s is None:
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + timeout_s
        timer = self._timer
        if timer is not None:
            if self._timer_due <= due + 0.001:
                return
            timer.cancel()
        self._timer, self._timer_due = loop.call_at(due, self._on_timer), due

    def _on_timer(self) -> None:
        self._timer = None
        self._wake.set()

    def _has_demand(self) -> bool:
        unacked_max = self.settings.consumer_unacked_events_max
        return any(m.available(unacked_max) for m in self.core.members.values())

    def _timeout_s(self) -> float | None:
        now = now_ms()
        due = [t for t in (self.core.next_due_ms(now),) if t is not None]
        if self.core.dirty:
            due.append(self._last_persist_ms + self.settings.cursor_persist_interval_ms)
        if not due:
            return None
        return max(0.0, (min(due) - now) / 1000) + 0.001

    # ------------------------------------------------------------ carrying out

    async def _carry_out(self) -> None:
        """Send what the core decided, tell consumers of range and active changes."""
        if not self._send_held():  # records to read first
            unsent, self._unsent = self._unsent, []
            core, seeks = self.core, self.core.seeks
            missing = self.cache.missing(np.concatenate([s.events.offsets for s, _ in unsent]))
            if len(missing):
                for record in await asyncio.to_thread(
                        read_records_holding, self.store, self.partition.meta.topic_id,
                        self.index, distinct(missing).tolist()):
                    self.cache.add(record)
            if core.seeks != seeks:  # decided before a seek that told the consumers
                for send, _ in unsent:
                    core.process_unsent(send.consumer, len(send.events.offsets))
                unsent = []
            opened = open_windows(self.core, self.cache, [send for send, _ in unsent])
            for (send, nacks_seen), windows in zip(unsent, opened, strict=True):
                self._deliver(send.consumer, send.events, nacks_seen, send.send, None, windows)
            self._count_sent()
        self._tell_changes()

    def _carry_out_held(self) -> bool:
        """`_carry_out` without awaiting; False (nothing told yet) when records of the
        sends must be read first."""
        if not self._send_held():
            return False
        self._tell_changes()
        return True

    def _send_held(self) -> bool:
        """Send what the core decided if the cache holds its records; False leaves it
        in `_unsent` (with what came before it) for `_carry_out` to read them first."""
        sends = self.core.take_sends()
        if not sends:
            return not self._unsent
        # what each consumer's nacks the broker had seen when the core decided (a nack
        # may land while records are fetched)
        decided = [(send, self._nacks_seen(send.consumer)) for send in sends]
        # following the tail each send lies in one cached record, found here once
        held = [self.cache.holding_all(send.events.offsets) for send in sends]
        if self._unsent or not all(held):  # (`in` would compare each record with None)
            self._unsent += decided
            return False
        opened = open_windows(self.core, self.cache, sends, held)
        for (send, nacks_seen), entry, windows in zip(decided, held, opened, strict=True):
            self._deliver(send.consumer, send.events, nacks_seen, send.send, entry, windows)
        self._count_sent()
        return True

    def _tell_changes(self) -> None:
        """Tell consumers of range and active changes; trim the cache."""
        core = self.core
        for notice in core.take_notices():
            session = self.sessions.get(notice.consumer)
            if session is None:
                continue
            if notice.ranges is not None:
                ranges = [pb.HashRange(slot_first=r.slot_first, slot_last=r.slot_last)
                          for r in notice.ranges]
                message = pb.SubscribeResponse(range_change=pb.RangeChange(
                    partition=self.index, ranges=ranges))
            else:
                message = pb.SubscribeResponse(active_change=pb.ActiveChange(
                    partition=self.index, active=bool(notice.active)))
            session.send(message.SerializeToString())
        self.cache.trim(self._cache_floor)
        self._cache_floor = -1

    def _nacks_seen(self, consumer: str) -> int:
        session = self.sessions.get(consumer)
        return 0 if session is None else session.nacks_seen

    def _deliver(self, consumer: str, events: Taken, nacks_seen: int, send: int,
                 entry: CachedRecord | None, windows: frozenset[int]) -> None:
        session = self.sessions.get(consumer)
        counts = events.counts if np.count_nonzero(events.counts) else None  # C, not _methods
        if session is None:
            return
        messages, gone = delivery_messages(self.cache, events.offsets, counts, nacks_seen,
                                           self.settings.delivery_bytes_max, send, entry,
                                           windows)
        if len(gone):  # retention removed them meanwhile: acknowledged, as for the core
            starts, stops = runs_of(gone)
            self.core.process_ack(consumer, starts, stops)
        for message in messages:
            session.send(message)
        self._sent_counts[0] += len(events) - len(gone)
        if counts is not None:
            self._sent_counts[1] += int(np.count_nonzero(counts))

    def _count_sent(self) -> None:
        """Add what `_deliver` sent to the metrics, once a round (an inc takes a lock)."""
        dispatched, redelivered = self._sent_counts
        if dispatched:
            self._dispatched.inc(dispatched)
        if redelivered:
            self._redelivered.inc(redelivered)
        self._sent_counts = [0, 0]


__all__ = ["Kind", "PartitionDispatcher"]
