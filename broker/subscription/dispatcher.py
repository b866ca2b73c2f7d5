"""The task that dispatches one subscription on one partition.

Two phases per round (STYLE §1): read whole records from the log on a
worker thread, then call a pure planner (`plan_dispatch` for Key_Shared,
Exclusive and Failover; `SharedDispatch` for Shared) and send each consumer
one message with its slice. Its state is owned by this task; the
membership and ack methods (`attach`, `detach`, `grant`, `ack`, `nack`,
`seek`) are called by the subscription manager on the same event loop and
never await, so they are atomic with respect to a round and need no lock.
They change state and wake the task; the round acts on whatever is ready.

Candidates of a round, in offset order: the replay set (events that waited,
or were given back by a nack, ack timeout or a consumer that left), then the
fresh events read from the log and not yet examined. Every replay offset is
below every fresh one, so the planner's per-slot order rule holds.

It reads only up to the partition's `end_offset` (what is durable; the
partition clock runs ahead while a group commit is written) and never idles
while events up to it are unread and some consumer could take them: the log
may grow while a round awaits, and nothing else would wake the task.

Exclusive and Failover run `plan_dispatch` with an owner table that gives
every slot to the active consumer: the same code keeps their per-key order
across nacks. Key_Shared adds the selector's table, the `DrainTracker`'s
draining slots and the look-ahead limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.metrics import DISPATCHED_EVENTS, REDELIVERED_EVENTS
from broker.partition import Partition, now_ms
from broker.read_path import EventSelector
from broker.subscription.consumer_state import (
    PartitionConsumer,
    RateMeter,
    Session,
    discard_in_ranges,
)
from broker.subscription.cursor import Cursor
from broker.subscription.delivery import CachedRecord, RecordCache, delivery_bytes
from broker.subscription.dispatch import (
    DispatchPlan,
    DrainTracker,
    SharedDispatch,
    pick_active,
    plan_dispatch,
)
from broker.subscription.log_reader import ReadRecord, read_records
from broker.subscription.membership import KeySharedMembership
from broker.subscription.redelivery import Redeliveries
from broker.subscription.selector import OwnerTable, RangeChanges, build_owner_table
from broker.subscription.spec import SubscriptionSpec
from sdk.core.hashing import SLOT_MAX
from sdk.core.pb import keybus_pb2 as pb

log = logging.getLogger("keybus.dispatch")
DeadLetterSink = Callable[[SubscriptionSpec, list[bytes]], Awaitable[None]]
FRESH_COMPACT_MIN = 4096


class PartitionDispatcher:
    """One subscription on one partition; see the module docstring."""

    def __init__(self, spec: SubscriptionSpec, partition: Partition, store: RocksStore,
                 settings: Settings, cursor: Cursor, selector: EventSelector | None,
                 dead_letter: DeadLetterSink) -> None:
        self.spec = spec
        self.partition = partition
        self.index = partition.index
        self.store = store
        self.settings = settings
        self.cursor = cursor
        self.selector = selector
        self._dead_letter_sink = dead_letter
        self.persisted_mark_delete = cursor.mark_delete
        self._dirty = False
        self._last_persist_ms = 0
        self._persist_timer: asyncio.TimerHandle | None = None
        self.read_position = cursor.mark_delete
        if self.read_position < partition.start_offset:  # retention removed them: nothing to send
            cursor.ack_ranges([(self.read_position, partition.start_offset)])
            self.read_position = partition.start_offset
            self._dirty = True
        self.cache = RecordCache()
        self._fresh_offsets: list[int] = []
        self._fresh_slots: list[int] = []
        self._fresh_start = 0
        self.replay: dict[int, int] = {}  # offset -> slot, waiting for (re)delivery
        self.redeliveries = Redeliveries()
        self.consumers: dict[str, PartitionConsumer] = {}
        self.tracker = DrainTracker()
        self.key_shared = (KeySharedMembership(spec.mode, settings.key_shared_points_per_consumer)
                           if spec.type == pb.KEY_SHARED else None)
        self.shared = SharedDispatch() if spec.type == pb.SHARED else None
        self.active: str | None = None  # Exclusive / Failover
        self._active_table: OwnerTable = build_owner_table([], [])
        self.meter = RateMeter(now_ms())
        self.last_waiting: tuple[list[int], list[int]] = ([], [])
        self._dead_letter_pending: dict[int, int] = {}
        self._dead_letter_task: asyncio.Task[None] | None = None
        self._generation = 0  # bumped by seek: a read in flight is then discarded
        self._wake = asyncio.Event()
        self._data_task: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.closed = False

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"dispatch {self.spec.topic}/{self.index}/{self.spec.name}")

    async def stop(self, persist: bool = True) -> None:
        self.closed = True
        if self._persist_timer is not None:
            self._persist_timer.cancel()
        for task in (self._task, self._data_task, self._dead_letter_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, BrokerError):
                    await task
        if persist and self._dirty:
            with contextlib.suppress(Exception):
                await self._persist(now_ms())

    def wake(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        try:
            while not self.closed:
                self._wake.clear()
                now = now_ms()
                self._expire(now)
                did_read = await self._read() if self._want_read() else False
                sent = self._dispatch(now_ms())
                if self._dirty and now - self._last_persist_ms >= \
                        self.settings.cursor_persist_interval_ms:
                    await self._persist(now)
                self._start_dead_letters()
                if not (sent or did_read):
                    await self._idle()
                await asyncio.sleep(0)  # let acks and permits queued meanwhile land first
        except BrokerError:  # the topic was deleted under us: the manager ends the streams
            self.closed = True
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("dispatcher %s/%d/%s failed", self.spec.topic, self.index,
                          self.spec.name)
            self.closed = True
            for consumer in list(self.consumers.values()):
                consumer.session.close(BrokerError("shutting_down"))

    async def _idle(self) -> None:
        """Wait for a wake, new log data (when someone could take it) or a timer."""
        if self._want_read():  # the log grew while the round awaited: nothing would wake us
            return
        wake: asyncio.Future[Any] = asyncio.ensure_future(self._wake.wait())
        waits: set[asyncio.Future[Any]] = {wake}
        if self._has_demand() and self.read_position >= self.partition.end_offset:
            if self._data_task is None or self._data_task.done():
                self._data_task = asyncio.ensure_future(
                    self.partition.wait_for_data(self.read_position))
            waits.add(self._data_task)
        try:
            await asyncio.wait(waits, timeout=self._timeout_s(),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            wake.cancel()
        data = self._data_task
        if data is not None and data.done() and not data.cancelled():
            error = data.exception()
            self._data_task = None
            if error is not None:
                raise error

    def _timeout_s(self) -> float | None:
        now = now_ms()
        due: list[int] = []
        next_nack = self.redeliveries.next_due_ms()
        if next_nack is not None:
            due.append(next_nack)
        for consumer in self.consumers.values():
            timeout = consumer.session.spec.ack_timeout_ms
            if timeout and consumer.sent_log:
                due.append(consumer.sent_log[0][0] + timeout)
        if self._dirty:
            due.append(self._last_persist_ms + self.settings.cursor_persist_interval_ms)
        if not due:
            return None
        return max(0.0, (min(due) - now) / 1000) + 0.001

    # ------------------------------------------------------------ reading

    def _fresh_pending(self) -> int:
        return len(self._fresh_offsets) - self._fresh_start

    def _has_demand(self) -> bool:
        limit = self.settings.consumer_unacked_events_max
        return any(c.permits > 0 and len(c.unacked) < limit for c in self.consumers.values())

    def _want_read(self) -> bool:
        if self.read_position >= self.partition.end_offset or not self._has_demand():
            return False
        if self._fresh_pending() >= self.settings.dispatch_read_events_max:
            return False
        return len(self.replay) < self._look_ahead_max()

    async def _read(self) -> bool:
        """Read the next records into the cache and the fresh candidates."""
        start, generation = self.read_position, self._generation
        end = self.partition.end_offset
        records = await asyncio.to_thread(
            read_records, self.store, self.partition.meta.topic_id, self.index, start, end,
            self.settings.dispatch_read_events_max, self.selector)
        if generation != self._generation or self.closed:
            return False
        position = start
        for record in records:
            if record.base > position:  # removed by retention while unread
                self._ack_filtered([(position, record.base)])
            self._take(record, max(position, record.base))
            position = record.base + record.count
        if not records and start < self.partition.start_offset:
            self._ack_filtered([(start, self.partition.start_offset)])
            position = self.partition.start_offset
        self.read_position = max(position, start)
        return bool(records) or position > start

    def _take(self, record: ReadRecord, start: int) -> None:
        """Add a record's unacknowledged, passing events from `start` to the candidates."""
        base, end, skip = record.base, record.base + record.count, start - record.base
        gaps = self.cursor.unacked_in(start, end)  # acked above the mark-delete: skip them
        if record.passing is None and gaps == [(start, end)]:
            offsets: list[int] | range = range(start, end)
            slots = record.slots[skip:] if skip else record.slots
        else:
            positions: list[int] | range = range(skip, record.count)
            if record.passing is not None:
                positions = [p for p in record.passing if p >= skip]
                self._ack_filtered(_gaps(base, skip, record.count, positions))
            if gaps != [(start, end)]:
                unacked = bytearray(record.count)
                for gap_start, gap_stop in gaps:
                    unacked[gap_start - base:gap_stop - base] = b"\x01" * (gap_stop - gap_start)
                positions = [p for p in positions if unacked[p]]
            offsets = [base + p for p in positions]
            slots = [record.slots[p] for p in positions]
        if not offsets:
            return
        self.cache.add(CachedRecord(base, record.count, record.body, record.record, record.slots))
        self._fresh_offsets.extend(offsets)
        self._fresh_slots.extend(slots)

    def _ack_filtered(self, ranges: list[tuple[int, int]]) -> None:
        """Events the filter drops (or retention removed) count as acknowledged."""
        if ranges:
            self.cursor.ack_ranges(ranges)
            self._dirty = True

    # ------------------------------------------------------------ dispatch

    def _look_ahead_max(self) -> int:
        asked = [c.session.spec.look_ahead_max for c in self.consumers.values()
                 if c.session.spec.look_ahead_max]
        return min(asked) if asked else self.settings.look_ahead_events_max

    def _permits(self) -> dict[str, int]:
        limit = self.settings.consumer_unacked_events_max
        return {name: min(c.permits, limit - len(c.unacked))
                for name, c in self.consumers.items() if c.permits > 0}

    def _dispatch(self, now: int) -> int:
        """Plan one round and send each consumer its slice; returns events sent."""
        permits = self._permits()
        if not permits or not any(v > 0 for v in permits.values()):
            return 0
        replay_offsets = sorted(self.replay)
        replay = self.replay
        fresh_stop = self._fresh_start + self.settings.dispatch_read_events_max
        offsets = replay_offsets + self._fresh_offsets[self._fresh_start:fresh_stop]
        if not offsets:
            return 0
        slots = list(map(replay.__getitem__, replay_offsets))
        slots += self._fresh_slots[self._fresh_start:fresh_stop]
        plan = self._plan(offsets, slots, permits)
        self._apply(plan, offsets, slots, len(replay_offsets), now)
        return plan.sent_count()

    def _plan(self, offsets: list[int], slots: list[int], permits: dict[str, int]) -> DispatchPlan:
        if self.shared is not None:
            return self.shared.plan(offsets, permits)
        if self.key_shared is not None:
            table = self.key_shared.selector.owner_table()
            draining: Mapping[int, str] = self.tracker.draining
        else:
            table, draining = self._active_table, {}
        return plan_dispatch(offsets, slots, table, permits, draining, self.redeliveries.held(),
                             self._look_ahead_max())

    def _apply(self, plan: DispatchPlan, offsets: list[int], slots: list[int], n_replay: int,
               now: int) -> None:
        """Send the plan's slices; replayed events that went out leave the replay set,
        fresh ones that wait join it (C-level maps over the plan's positions)."""
        replay = self.replay
        for name, indexes in plan.send_indexes.items():
            for i in indexes[:bisect_left(indexes, n_replay)]:
                del replay[offsets[i]]
            self._send(self.consumers[name], plan.sends[name],
                       list(map(slots.__getitem__, indexes)), now)
        waiting = plan.waiting_indexes
        fresh_waiting = waiting[bisect_left(waiting, n_replay):]
        if fresh_waiting:
            replay.update(zip(map(offsets.__getitem__, fresh_waiting),
                              map(slots.__getitem__, fresh_waiting), strict=True))
        self._fresh_start += max(0, plan.examined - n_replay)
        if self._fresh_start >= FRESH_COMPACT_MIN and \
                self._fresh_start * 2 >= len(self._fresh_offsets):
            del self._fresh_offsets[:self._fresh_start]
            del self._fresh_slots[:self._fresh_start]
            self._fresh_start = 0
        if plan.examined:
            self.last_waiting = (plan.waiting_offsets, plan.waiting_reasons)

    def _send(self, consumer: PartitionConsumer, offsets: list[int], slots: list[int],
              now: int) -> None:
        counts = self.redeliveries.counts_of(offsets)
        session = consumer.session
        session.send(delivery_bytes(self.cache, offsets, counts, session.nacks_seen))
        n = len(offsets)
        consumer.permits -= n
        consumer.unacked.update(zip(offsets, slots, strict=True))
        if consumer.session.spec.ack_timeout_ms:
            consumer.sent_log.append((now, offsets))
        consumer.delivered += n
        consumer.meter.add(n, now)
        self.meter.add(n, now)
        DISPATCHED_EVENTS.labels(self.spec.topic, self.spec.name).inc(n)
        if counts is not None:
            REDELIVERED_EVENTS.labels(self.spec.topic, self.spec.name).inc(
                sum(1 for c in counts if c))

    # ------------------------------------------------------------ timers

    def _expire(self, now: int) -> None:
        """Move due nacks to the replay set; give back events past their ack timeout."""
        offsets, slots = self.redeliveries.process_due(now)
        for offset, slot in zip(offsets, slots, strict=True):
            if not self.cursor.is_acked(offset):
                self.replay[offset] = slot
        for consumer in self.consumers.values():
            timeout = consumer.session.spec.ack_timeout_ms
            log_ = consumer.sent_log
            while log_ and log_[0][0] + timeout <= now:
                _, sent = log_.popleft()
                expired = [o for o in sent if o in consumer.unacked]
                if expired:
                    self._give_back(consumer, [(o, o + 1) for o in expired], now)

    def _give_back(self, consumer: PartitionConsumer, ranges: list[tuple[int, int]],
                   due_ms: int) -> None:
        offsets, slots = consumer.take_unacked(ranges)
        if not offsets:
            return
        self.tracker.process_released(offsets)
        self.redeliveries.process_nacked(offsets, slots, due_ms)
        limit = self.spec.max_redeliveries
        for offset, slot in zip(offsets, slots, strict=True):
            if self.redeliveries.exhausted(offset, limit):
                self.redeliveries.forget(offset)
                self._dead_letter_pending[offset] = slot
        self._wake.set()

    # ------------------------------------------------------------ dead letters

    def _start_dead_letters(self) -> None:
        if not self._dead_letter_pending or (
                self._dead_letter_task is not None and not self._dead_letter_task.done()):
            return
        batch = dict(sorted(self._dead_letter_pending.items()))
        self._dead_letter_pending.clear()
        self._dead_letter_task = asyncio.get_running_loop().create_task(
            self._dead_letter(batch))

    async def _dead_letter(self, batch: dict[int, int]) -> None:
        offsets = list(batch)
        records = []
        i = 0
        while i < len(offsets):
            entry = self.cache.find(offsets[i])
            j = i
            while j < len(offsets) and offsets[j] < entry.end:
                j += 1
            records.append(entry.subset_bytes([o - entry.base for o in offsets[i:j]]))
            i = j
        try:
            await self._dead_letter_sink(self.spec, records)
        except Exception as e:  # retry through the normal path: the key stays held
            log.warning("dead-letter of %d events of %s/%d/%s failed, redelivering: %s",
                        len(offsets), self.spec.topic, self.index, self.spec.name, e)
            self.replay.update(batch)
            self._wake.set()
            return
        ranges = [(o, o + 1) for o in offsets]
        self.cursor.ack_ranges(ranges)
        self._dirty = True
        self.tracker.process_acks(ranges)
        self._wake.set()

    # ------------------------------------------------------------ persistence

    async def _persist(self, now: int) -> None:
        data = self.cursor.to_bytes()
        mark = self.cursor.mark_delete
        self._dirty = False
        self._last_persist_ms = now
        await asyncio.to_thread(self.store.put_cursors, self.partition.meta.topic_id,
                                self.spec.name, {self.index: data})
        self.persisted_mark_delete = mark
        self.redeliveries.prune_below(mark)
        self.cache.evict_below(mark)

    # ------------------------------------------------------------ membership

    def attach(self, session: Session, now: int) -> None:
        """Add a consumer (runs on the event loop, never awaits).

        Raises:
            BrokerError: the name is taken, or Key_Shared refuses it.
        """
        name = session.name
        if name in self.consumers:
            raise BrokerError("consumer_name_taken", consumer=name,
                              subscription=self.spec.name, topic=self.spec.topic)
        consumer = PartitionConsumer(session, now)
        if self.key_shared is not None:
            self.key_shared.update_rates(self.consumers, now)
            changes = self.key_shared.add(session, now, self.spec)
            self.consumers[name] = consumer
            self._process_moves(changes, newcomer=name)
        elif self.shared is not None:
            self.shared.add_consumer(name)
            self.consumers[name] = consumer
        else:
            self.consumers[name] = consumer
            self._choose_active(newcomer=name)
        self._wake.set()

    def detach(self, name: str, now: int) -> None:
        """Remove a consumer; its unacknowledged events go back for redelivery."""
        consumer = self.consumers.pop(name, None)
        if consumer is None:
            return
        self.redeliveries.process_lost(list(consumer.unacked))
        self.replay.update(consumer.unacked)
        if self.key_shared is not None:
            self.tracker.remove_consumer(name)
            self.key_shared.update_rates(self.consumers, now)
            changes = self.key_shared.selector.remove_consumer(name)
            self._process_moves(changes, newcomer=None)
        elif self.shared is not None:
            self.shared.remove_consumer(name)
        else:
            self._choose_active(newcomer=None)
        self._wake.set()

    def _process_moves(self, changes: RangeChanges, newcomer: str | None) -> None:
        """Drain the moved slots the losers still hold; tell whoever's ranges changed."""
        unacked = {name: (list(c.unacked), list(c.unacked.values()))
                   for name, c in self.consumers.items() if name in changes.consumers}
        self.tracker.process_moves(changes, unacked)
        told = set()
        for name in changes.consumers:
            if name in self.consumers:
                self._tell_ranges(name)
                told.add(name)
        if newcomer is not None and newcomer not in told:
            self._tell_ranges(newcomer)

    def _tell_ranges(self, name: str) -> None:
        assert self.key_shared is not None
        ranges = [pb.HashRange(slot_first=r.slot_first, slot_last=r.slot_last)
                  for r in self.key_shared.selector.ranges_of(name)]
        message = pb.SubscribeResponse(range_change=pb.RangeChange(partition=self.index,
                                                                   ranges=ranges))
        self.consumers[name].session.send(message.SerializeToString())

    def _choose_active(self, newcomer: str | None) -> None:
        """Exclusive/Failover: pick the active consumer; tell everyone on a change."""
        ranked = [(n, c.session.spec.priority) for n, c in self.consumers.items()]
        active = pick_active(ranked, self.index)
        previous = self.active
        if active != previous:
            old = self.consumers.get(previous) if previous is not None else None
            if old is not None:  # rewind what the old active holds to the new one
                self.replay.update(old.unacked)
                old.unacked.clear()
                old.sent_log.clear()
            self.active = active
            self._active_table = build_owner_table(
                [] if active is None else [(0, SLOT_MAX, active)],
                [] if active is None else [active])
        if self.spec.type != pb.FAILOVER:
            return
        for name in self.consumers:
            if active != previous or name == newcomer:
                message = pb.SubscribeResponse(active_change=pb.ActiveChange(
                    partition=self.index, active=name == active))
                self.consumers[name].session.send(message.SerializeToString())

    # ------------------------------------------------------------ flow control and acks

    def grant(self, name: str, count: int) -> None:
        """Add permits (runs on the event loop).

        Raises:
            BrokerError: count 0, or more outstanding permits than allowed.
        """
        consumer = self.consumers[name]
        limit = self.settings.consumer_permits_max
        if count < 1 or consumer.permits + count > limit:
            raise BrokerError("permits_invalid", partition=self.index,
                              detail=f"count={count} with {consumer.permits} outstanding is "
                                     f"out of range; allowed: count >= 1 and at most {limit} "
                                     f"outstanding per consumer and partition")
        consumer.permits += count
        self._wake.set()

    def ack(self, name: str, ranges: list[tuple[int, int]]) -> None:
        """Acknowledge half-open offset ranges (sorted, merged, checked by the caller)."""
        consumer = self.consumers.get(name)
        self.cursor.ack_ranges(ranges)
        self._dirty = True
        self._schedule_persist()
        limit = self.settings.consumer_unacked_events_max
        was_full = consumer is not None and len(consumer.unacked) >= limit
        taken = consumer.discard_unacked(ranges) if consumer is not None else 0
        if taken < sum(stop - start for start, stop in ranges):
            for other in self.consumers.values():  # rewound or late: held elsewhere
                if other is not consumer:
                    other.discard_unacked(ranges)
            discard_in_ranges(self.replay, ranges)
        wake = was_full
        if self.tracker.draining and self.tracker.process_acks(ranges):
            wake = True
        if self.redeliveries.retrying:
            self.redeliveries.process_acks(ranges)
            wake = True
        self.cache.evict_below(self.cursor.mark_delete)
        self.cache.evict_acked(self.cursor.is_range_acked, ranges)
        if wake:
            self._wake.set()

    def _schedule_persist(self) -> None:
        """Wake the task when the changed cursor is due to be written (one timer at a time)."""
        if self._persist_timer is None or self._persist_timer.cancelled():
            delay_ms = max(0, self._last_persist_ms + self.settings.cursor_persist_interval_ms
                           - now_ms())
            self._persist_timer = asyncio.get_running_loop().call_later(
                delay_ms / 1000, self._persist_due)

    def _persist_due(self) -> None:
        self._persist_timer = None
        self._wake.set()

    def nack(self, name: str, ranges: list[tuple[int, int]], delay_ms: int, now: int) -> None:
        """Give events back for redelivery after `delay_ms`."""
        consumer = self.consumers.get(name)
        if consumer is not None:
            self._give_back(consumer, ranges, now + delay_ms)

    async def seek(self, offset: int) -> None:
        """Reset the cursor to `offset`: everything below counts as acknowledged,
        everything from it on is delivered again (in flight events are forgotten)."""
        self._generation += 1
        self.cursor.seek(offset)
        self.read_position = offset
        self.cache.clear()
        self._fresh_offsets, self._fresh_slots, self._fresh_start = [], [], 0
        self.replay.clear()
        self.redeliveries.clear()
        self._dead_letter_pending.clear()
        self.tracker = DrainTracker()
        for consumer in self.consumers.values():
            consumer.unacked.clear()
            consumer.sent_log.clear()
        if self._data_task is not None:
            self._data_task.cancel()
            self._data_task = None
        await self._persist(now_ms())
        self._wake.set()


def _gaps(base: int, skip: int, count: int, keep: list[int]) -> list[tuple[int, int]]:
    """Offset ranges of positions skip..count-1 of a record that are not in `keep`."""
    gaps: list[tuple[int, int]] = []
    previous = skip
    for position in keep:
        if position > previous:
            gaps.append((base + previous, base + position))
        previous = position + 1
    if previous < count:
        gaps.append((base + previous, base + count))
    return gaps
