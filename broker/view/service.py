"""The compacted views of a broker: one maintainer task per partition with a view.

A maintainer follows its partition's stored log (the durable end offset, so
a leader and a follower that appends replicated records work the same way)
and folds what it has not seen into the view, one bounded pass at a time on
a worker thread, then waits for more. The produce path never waits for it:
the view lags the log, and the lag is a metric (`keybus_view_lag_events`)
and a column of `keybus topics describe`.

It also holds the partition's retention floor: retention never removes a
record the view has not folded in, nor one an active bootstrap still has to
read (a pin), so a snapshot plus its catch-up always covers the whole log.
A follower's view whose log restarted past it (load.py) is marked; the
maintainer then loads it from the upstream the relay attached (`source`)
instead of folding, and waits while none is attached; one that no upstream
will load is folded from the log (`fold_from_log`, broker/relay/view_load.py).
Runs on the event loop; blocking work goes to worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from broker.config import Settings
from broker.errors import PARTITION_CLOSED, BrokerError
from broker.log.rocks_store import RocksStore
from broker.metrics import VIEW_ERRORS, VIEW_FOLDED_EVENTS, VIEW_LAG_EVENTS
from broker.partition import Partition, TopicMeta
from broker.supervision import RestartBackoff, describe_cause
from broker.view.codec import ViewState
from broker.view.compaction import Compactor
from broker.view.load import LoadError, ViewSource, load_view
from broker.view.store import ViewStore
from broker.view.worker import ViewWorker
from sdk.core.pb import keybus_pb2 as pb

log = logging.getLogger("keybus.view")
# A failed pass is retried after 1 s, doubling to 60 s while it keeps failing: a cause
# that does not go away (disk damage) must not write a traceback a second forever.
ERROR_BACKOFF = RestartBackoff(1_000, 60_000)


class PartitionView:
    """One partition's view: its state, its maintainer task and its pins."""

    def __init__(self, views: ViewStore, partition: Partition, settings: Settings,
                 worker: ViewWorker, loads: asyncio.Semaphore | None = None) -> None:
        self.views = views
        self._worker = worker
        self.partition = partition
        self.settings = settings
        meta = partition.meta
        self.state: ViewState = views.state(meta.topic_id, partition.index)
        # > 0: the view lacks keys whose events are all below this offset (folded from a
        # log that starts there when no upstream loaded it: `fold_from_log`)
        self.gap = views.gap(meta.topic_id, partition.index)
        self.delete_retention_ms = meta.delete_retention_ms or settings.delete_retention_ms
        self._pins: dict[int, int] = {}
        self._pin_ids = 0
        self._task: asyncio.Task[None] | None = None
        self._pass: asyncio.Future[ViewState] | None = None  # the pass on a worker thread
        self._swept_ms = 0
        self._changed = asyncio.Event()  # set after every pass (bootstraps wait on it)
        self.source: ViewSource | None = None  # where a marked view loads from (relay)
        self._sourced = asyncio.Event()  # set while `source` is
        # the broker's view_loads_max: each load holds an upstream bootstrap slot
        self._loads = loads or asyncio.Semaphore(settings.view_loads_max)
        # Set: no upstream will load this marked view (`fold_from_log` says why); the
        # maintainer clears it to fold it from the log, retried while that fails.
        self.fold_why = ""
        self.fold_failure = ""  # the last failure of that clear (Bootstrap's refusal names it)

    # ------------------------------------------------------------ retention floor and pins

    def floor(self) -> int:
        """Retention keeps every record starting at or after this offset."""
        return min([self.state.offset_next, *self._pins.values()])

    def pin(self, offset: int) -> int:
        """Keep the log from `offset` on until unpinned; returns the pin's id."""
        self._pin_ids += 1
        self._pins[self._pin_ids] = offset
        return self._pin_ids

    def move_pin(self, pin_id: int, offset: int) -> None:
        if pin_id in self._pins:
            self._pins[pin_id] = max(self._pins[pin_id], offset)

    def unpin(self, pin_id: int) -> None:
        self._pins.pop(pin_id, None)

    # ------------------------------------------------------------ maintenance

    def start(self) -> None:
        meta = self.partition.meta
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"view {meta.name}/{self.partition.index}")

    async def stop(self) -> None:
        """Stop the maintainer; a pass already on a worker thread finishes first
        (the store may be closed right after)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._pass is not None:
            await asyncio.wait([self._pass])
        with contextlib.suppress(KeyError):  # no pass ran: never labelled
            VIEW_LAG_EVENTS.remove(self.partition.meta.name, str(self.partition.index))

    async def rebuild(self) -> None:
        """Drop the view and fold it again from the log (a truncation cut events it
        folded in). Stops the maintainer (a pass in flight finishes first), clears
        on a worker thread, starts again from the log's first record. A log that
        retention trimmed starts past keys the view held: the gap records that
        start (kept if higher), so Bootstrap says so (`view_incomplete`) instead of
        serving the snapshot as whole."""
        await self.stop()
        meta = self.partition.meta
        self.state = await self._worker.run(self.views.clear, meta.topic_id, self.partition.index,
                                            self.partition.start_offset)
        self.gap = self.views.gap(meta.topic_id, self.partition.index)
        self._signal()
        self.start()

    # ------------------------------------------------------------ loading (load.py)

    def attach_source(self, source: ViewSource) -> None:
        """A marked view loads from `source` from now on (a follower started)."""
        self.source = source
        self._sourced.set()

    def detach_source(self, source: ViewSource) -> None:
        """`source` is gone (its follower stopped); another's attachment stays."""
        if self.source is source:
            self.source = None
            self._sourced.clear()

    async def mark_for_load(self, start: int) -> None:
        """Clear the view and mark it to be loaded from its upstream, the log now
        starting at `start` (load.py, rule 1): before the log restarts. A load or
        pass in flight is stopped first (its state would overwrite the mark)."""
        await self.stop()
        meta = self.partition.meta
        self.state = await self._worker.run(self.views.mark_for_load, meta.topic_id,
                                            self.partition.index, start)
        self.gap = 0  # the load brings the upstream's (load.py rule 5)
        self._signal()
        self.start()

    async def fold_from_log(self, why: str) -> None:
        """No upstream will load this marked view (`why`: e.g. the broker leads the
        topic now, or follows it no more): fold it from the retained log, as a view
        rebuilt after a truncation, with one WARNING naming what it lacks.

        The maintainer clears the view and folds it; this only hands it the work
        (restarting it, so that a wait for a source ends) and never raises for it.
        Why: it runs while the broker starts and at a leadership change, and a
        failed clear (a store error) there stopped the start, or the change, for a
        view the broker can rebuild. The maintainer retries a failed clear with
        backoff, one WARNING per kind of failure; Bootstrap is refused with
        UNAVAILABLE saying so meanwhile (`bootstrap.check_loaded`)."""
        if not self.state.load_from or self.fold_why:
            return
        log.warning("view of %s/%d: it waited to be loaded from an upstream, and %s; folding "
                    "it from this broker's log, which restarted at offset %d (keys written "
                    "only below it are missing from the view)", self.partition.meta.name,
                    self.partition.index, why, self.state.load_from)
        await self.stop()
        self.fold_why = why
        self.start()

    async def _fold_marked(self) -> None:
        """Clear the marked view (`fold_from_log`): the maintainer folds it from the
        log's first record from then on."""
        meta = self.partition.meta
        # what it lacks: every key written only below the log's start
        self.state = await self._on_thread(self.views.clear, meta.topic_id, self.partition.index,
                                           self.partition.start_offset)
        self.gap = self.views.gap(meta.topic_id, self.partition.index)
        self.fold_why = self.fold_failure = ""
        self._signal()

    async def _load(self, source: ViewSource) -> None:
        meta, index = self.partition.meta, self.partition.index
        log.info("view of %s/%d: loading it from %s's view (this broker's log restarted at "
                 "%d)", meta.name, index, source.name, self.state.load_from)
        self.state = await load_view(self.views, self._on_thread, self.partition, source,
                                     self.state.load_from)
        self.gap = self.views.gap(meta.topic_id, index)
        log.info("view of %s/%d: loaded from %s up to offset %d (%d keys); it folds this "
                 "broker's log from there", meta.name, index, source.name,
                 self.state.offset_next, self.state.keys)
        self._signal()

    # ------------------------------------------------------------ the maintainer

    async def _run(self) -> None:
        interval_s = self.settings.view_sweep_interval_ms / 1000
        failures, last_cause = 0, ""
        while True:
            try:
                if self.state.load_from and self.fold_why:
                    failures, last_cause = await self._try_fold_marked(failures, last_cause)
                    continue
                if self.state.load_from:
                    if self.source is None:
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(interval_s):
                                await self._sourced.wait()
                        continue
                    async with self._loads:  # the source may be gone after the wait
                        if self.source is not None and self.state.load_from:
                            await self._load(self.source)
                    failures = 0
                    continue
                if self.state.offset_next < self.partition.end_offset:
                    await self._linger()
                    await self._fold()
                    if failures:
                        log.warning("view of %s/%d: maintenance passes work again after %d "
                                    "failure(s)", self.partition.meta.name, self.partition.index,
                                    failures)
                        failures, last_cause = 0, ""
                    continue
                if self._sweep_due():
                    await self._sweep()
                # asyncio.timeout, not wait_for: on 3.11 wait_for drops a cancel that lands
                # as the wait ends (CPython gh-86296), and `stop` then waits for us forever
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(interval_s):
                        await self.partition.wait_for_data(self.state.offset_next)
            except asyncio.CancelledError:
                raise
            except BrokerError as e:
                if e.kind.name in PARTITION_CLOSED:  # topic deleted, broker stopping
                    return
                # a damaged block (store_unreadable) and the like: ending here, silently,
                # would leave the view behind for good and hold retention back with it
                failures, last_cause = await self._pass_failed(e, failures, last_cause)
            except LoadError as e:  # the upstream's answer: no traceback
                failures += 1
                delay_ms = ERROR_BACKOFF.delay_ms(failures)
                log.warning("view of %s/%d: loading it failed (%s); retrying in %d ms (Bootstrap "
                            "here is refused meanwhile)", self.partition.meta.name,
                            self.partition.index, e, delay_ms)
                await asyncio.sleep(delay_ms / 1000)
            except Exception as e:
                failures, last_cause = await self._pass_failed(e, failures, last_cause)

    async def _pass_failed(self, e: Exception, failures: int, last_cause: str
                           ) -> tuple[int, str]:
        """Report a failed pass (its traceback once per cause, then a line a retry)
        and back off. Returns the failures in a row and this one's cause."""
        VIEW_ERRORS.labels(self.partition.meta.name).inc()
        failures += 1
        delay_ms = ERROR_BACKOFF.delay_ms(failures)
        cause = describe_cause(e)
        name, index = self.partition.meta.name, self.partition.index
        if cause != last_cause:  # a new cause: its traceback, once
            log.error("view of %s/%d: maintenance pass failed; retrying in %d ms "
                      "(retention keeps the log from offset %d on meanwhile)", name,
                      index, delay_ms, self.state.offset_next, exc_info=e)
        else:
            log.error("view of %s/%d: maintenance pass failed again (%s, %d in a "
                      "row); retrying in %d ms", name, index, cause, failures, delay_ms)
        await asyncio.sleep(delay_ms / 1000)
        return failures, cause

    async def _try_fold_marked(self, failures: int, last_cause: str) -> tuple[int, str]:
        """`_fold_marked`; on a failure one WARNING per kind of it, then the backoff.
        Returns the failures in a row and the last one's cause."""
        try:
            await self._fold_marked()
        except Exception as e:  # a BrokerError too: not the partition closing here
            VIEW_ERRORS.labels(self.partition.meta.name).inc()
            failures += 1
            delay_ms = ERROR_BACKOFF.delay_ms(failures)
            cause = self.fold_failure = describe_cause(e)
            if cause != last_cause:
                log.warning("view of %s/%d: clearing it to fold it from this broker's log "
                            "failed (%s); retrying with backoff, now in %d ms (Bootstrap here "
                            "is refused meanwhile)", self.partition.meta.name,
                            self.partition.index, cause, delay_ms)
            await asyncio.sleep(delay_ms / 1000)
            return failures, cause
        if failures:
            log.warning("view of %s/%d: cleared after %d failure(s); folding it from this "
                        "broker's log", self.partition.meta.name, self.partition.index, failures)
        return 0, ""

    async def _fold(self) -> None:
        meta, index = self.partition.meta, self.partition.index
        before = self.state.offset_next
        end, events_max = self.partition.end_offset, self.settings.view_pass_events_max
        self.state = await self._on_thread(self.views.fold_pass, meta.topic_id, index, end,
                                           events_max, self.settings.view_pass_bytes_max,
                                           backlog=end - before >= 2 * events_max)
        VIEW_FOLDED_EVENTS.labels(meta.name).inc(self.state.offset_next - before)
        VIEW_LAG_EVENTS.labels(meta.name, str(index)).set(
            max(0, self.partition.end_offset - self.state.offset_next))
        self._signal()

    async def _linger(self) -> None:
        """Wait until a full pass is in the log, or view_linger_ms: a pass over
        more events writes each hot key once for all of them."""
        full = self.state.offset_next + self.settings.view_pass_events_max
        if self.partition.end_offset < full and self.settings.view_linger_ms:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.view_linger_ms / 1000):
                    await self.partition.wait_for_data(full - 1)

    def _sweep_due(self) -> bool:
        return now_ms() - self._swept_ms >= self.settings.view_sweep_interval_ms

    async def _sweep(self) -> None:
        meta = self.partition.meta
        self._swept_ms = now_ms()
        self.state = await self._on_thread(
            self.views.sweep, meta.topic_id, self.partition.index,
            self._swept_ms - self.delete_retention_ms, self.settings.view_sweep_entries_max)
        self._signal()

    async def _on_thread(self, work: Callable[..., ViewState], *args: int,
                         backlog: bool = False) -> ViewState:
        """Run a pass on the views' worker thread (broker/view/worker.py: at a lower CPU
        priority unless it works off a `backlog`); `stop` waits for it even when cancelled."""
        self._pass = self._worker.run(work, *args, backlog=backlog)
        try:
            return await asyncio.shield(self._pass)
        finally:
            if self._pass.done():
                self._pass = None

    def _signal(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def wait_for(self, offset: int, timeout_s: float) -> bool:
        """Wait until the view holds every event below `offset`; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.state.offset_next < offset:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._changed.wait()
        return True

    def fill(self, info: pb.PartitionInfo) -> None:
        state = self.state
        info.view_offset = state.offset_next
        info.view_scn = state.scn
        info.view_keys = state.keys
        info.view_bytes = state.entry_bytes
        info.view_tombstones = state.tombstones


class ViewService:
    """Every partition view of the broker, by topic."""

    def __init__(self, store: RocksStore, settings: Settings) -> None:
        self.views = ViewStore(store, sizes_capacity=settings.view_sizes_remembered_max)
        self.settings = settings
        self._worker = ViewWorker(settings.view_thread_nice)
        # One view load at a time by default (view_loads_max): a follower with many
        # marked partitions held that many of its upstream's bootstrap slots at once,
        # for as long as its one view thread took to write them all.
        self._loads = asyncio.Semaphore(settings.view_loads_max)
        self._topics: dict[str, list[PartitionView]] = {}

    def start(self, meta: TopicMeta, partitions: list[Partition]) -> None:
        """Start the maintainers of a topic that keeps a view; wire retention to them."""
        if not meta.view:
            return
        views = []
        for partition in partitions:
            view = PartitionView(self.views, partition, self.settings, self._worker,
                                 self._loads)
            partition.retention_floor = view.floor
            if meta.compacted:
                compactor = Compactor(self.views, partition, view, self.settings)
                partition.compact_head = compactor.compact
            view.start()
            views.append(view)
        self._topics[meta.name] = views

    async def stop(self, topic: str) -> None:
        for view in self._topics.pop(topic, []):
            await view.stop()

    async def close(self) -> None:
        for topic in list(self._topics):
            await self.stop(topic)
        self._worker.close()  # idle: every pass was awaited above

    def of(self, topic: str, index: int) -> PartitionView:
        """The view of a partition (the caller checked the topic exists).

        Raises:
            BrokerError: the topic keeps no view.
        """
        views = self._topics.get(topic)
        if views is None:
            raise BrokerError("view_off", topic=topic)
        return views[index]

    def fill(self, topic: str, infos: list[pb.PartitionInfo]) -> None:
        for view, info in zip(self._topics.get(topic, []), infos, strict=False):
            view.fill(info)


def now_ms() -> int:
    return time.time_ns() // 1_000_000
