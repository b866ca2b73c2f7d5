"""The task that owns one partition: the only writer of its log.

Servicers hand it commands over a bounded queue and await the reply, so the
SCN clock, producer state and partition size need no locks (runs on the
partition task). Produce requests that queue up while a write is in flight
are written together in one WriteBatch with one fsync (group commit); one
that finds the task waiting for work is written by `submit` itself.
Readers never go through the queue: they read RocksDB on worker threads and
wait on `wait_for_data` to follow the tail. A follower's relay appends and
truncations (broker/relay/replica_log.py) run on the same task through
`run_on_task`, in queue order with everything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from broker import partition_positions as positions
from broker.config import Settings
from broker.derived import settle_slots
from broker.errors import PARTITION_CLOSED, BrokerError
from broker.log.recent import RecentRecords
from broker.log.rocks_store import RocksStore, Tail
from broker.log.wal_sync import request_synced
from broker.metrics import PRODUCE_COMMITS, PRODUCED_EVENTS
from broker.partition_commands import Command, OnTask, Produce, Trim
from broker.partition_trim import trim
from broker.partition_write import Written, write_group
from broker.produce_records import response_of
from broker.read_limit import ReadLimit
from broker.read_path import Chunk, ReadSpec, read_chunk
from broker.supervision import (
    RestartBackoff,
    describe_cause,
    fail_pending,
    mark_seen,
    supervise,
)
from broker.windows import PartitionClock, ProducerTable
from broker.worker_threads import WorkerThreads
from sdk.core.columns import SCN_SUPPLIED_MAX, BatchError, validate_batch
from sdk.core.hashing import SlotCache
from sdk.core.pb import keybus_pb2 as pb

PRODUCER_RESULTS_KEPT = 64
log = logging.getLogger("keybus.partition")


@dataclass(frozen=True, slots=True)
class TopicMeta:
    name: str
    topic_id: int
    partitions: int
    retention_ms: int
    retention_bytes: int
    created_ms: int
    # Compacted view and bootstrap (broker/view): keep a view; compact instead
    # of delete (Kafka's cleanup.policy=compact); how long tombstones stay.
    view: bool = False
    compacted: bool = False
    delete_retention_ms: int = 0
    # Which topic of this name this is (Kafka's topic ID): new at every create,
    # a follower's copied from its upstream. Unlike topic_id (this store's key
    # prefix) it is the same on every broker of a cluster, and clients keep it
    # beside the offsets they remember. `incarnation_backfilled`: made up when a
    # topic stored before brokers set it was loaded; a follower takes its
    # upstream's over such a one without judging (broker/relay/incarnation.py).
    incarnation: str = ""
    incarnation_backfilled: bool = False


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Partition:
    """One topic partition: its queue, its task, its in-memory tail state."""

    def __init__(self, store: RocksStore, meta: TopicMeta, index: int, settings: Settings,
                 tail: Tail, slot_cache: SlotCache | None = None) -> None:
        self.store = store
        self.slot_cache = slot_cache or SlotCache()
        self.meta = meta
        self.index = index
        self.settings = settings
        self.clock = PartitionClock(tail.next_offset, tail.last_scn)
        # The durable log end: advanced only once a write is durable (the clock
        # runs ahead of it while a group commit is being written). Replication
        # (copy, positions, truncation, election) works on it.
        self.log_end = tail.next_offset
        # What readers may see (reads, dispatch, the view, bootstrap, describe):
        # the log end, held back to the high watermark when one is set
        # (broker/read_limit.py), and the last SCN below it.
        self.end_offset = tail.next_offset
        self.last_scn = tail.last_scn
        self.limit = ReadLimit(tail.next_offset, tail.last_scn)
        self.start_offset = tail.start_offset
        self.bytes = tail.bytes
        self.producers = ProducerTable(PRODUCER_RESULTS_KEPT, settings.producer_ids_max)
        # Relay chaining: the epoch new records are appended under, and a check
        # that refuses produce on a broker that does not lead the topic.
        self.leader_epoch = 0
        self.write_guard: Callable[[], None] | None = None
        self._queue: asyncio.Queue[Command] = asyncio.Queue(
            settings.partition_queue_requests_max)
        self._appended = asyncio.Event()
        # The last durable records, for dispatchers following the tail (recent.py);
        # emptied by anything but a produce commit that writes or removes records.
        self.recent = RecentRecords(0 if meta.compacted else settings.recent_records_bytes_max,
                                    settings.recent_records_max)
        # Called (on the partition task) each time end_offset moves: dispatchers
        # wake on the durable offset without a task of their own waiting for it.
        self.listeners: set[Callable[[], None]] = set()
        # the metrics' children, looked up once (a `labels` call costs microseconds a commit)
        self._produced_events = PRODUCED_EVENTS.labels(meta.name)
        self._produce_commits = PRODUCE_COMMITS.labels(meta.name)
        self._closed = False
        self._deleted = False
        self.producers_checked_ms = 0  # retention's last producer-expiry pass
        self._task: asyncio.Task[None] | None = None
        # Store work the task runs on worker threads (retention, compaction): `stop`
        # waits for it, so none lands after a deleted topic's keys are gone.
        self.threads = WorkerThreads()
        # Supervision (broker/supervision.py): the commands the task is working
        # on, and why it refuses requests while it waits to be reopened.
        self._in_flight: list[Command] = []
        self._idle = False  # the task waits for a command (`_commit_now` may commit)
        self._failure: dict[str, Any] | None = None
        # Compacted view (broker/view): retention never trims at or past this
        # offset (what the view has not folded in yet, or an active bootstrap
        # still has to read); a compacted topic rewrites its head instead.
        self.retention_floor: Callable[[], int] | None = None
        self.compact_head: Callable[[int | None, int], Awaitable[tuple[int, int]]] | None = None
        # Retention is removing (or removed) every record below this offset. Set
        # before the delete, so a reader that checks it after a read knows
        # whether that read may have missed records (a bootstrap's catch-up; a
        # Read chunk that finds a gap, broker/read_path.py).
        self.removing_below = 0
        # Where each truncation (broker/relay/replica_log.py) cut the log, in order:
        # a read stream past a cut since it opened ends (`check_truncation`).
        self.truncations: list[int] = []

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        name = f"partition {self.meta.name}/{self.index}"
        backoff = RestartBackoff(self.settings.task_restart_backoff_ms,
                                 self.settings.task_restart_backoff_max_ms)
        self._task = asyncio.get_running_loop().create_task(
            supervise(name, self._run, self._fail, self._reopen, backoff, log), name=name)

    def _fail(self, error: Exception, retry_ms: int) -> None:
        """The task stopped on `error`: fail what it held and what is queued,
        and refuse new requests until `_reopen` (runs on the partition task)."""
        self._failure = {"topic": self.meta.name, "partition": self.index,
                         "cause": describe_cause(error), "retry_ms": retry_ms}
        failure = self._failure
        fail_pending(self._in_flight, self._queue,
                     lambda: BrokerError("partition_failed", **failure))

    def _reopen(self) -> None:
        """Reload the tail from the store, which holds only whole WriteBatches:
        whatever the failed task had moved in memory and not written is gone."""
        tail = self.store.recover_tail(self.meta.topic_id, self.index)
        self.clock = PartitionClock(tail.next_offset, tail.last_scn)
        self.start_offset, self.bytes = tail.start_offset, tail.bytes
        self.producers = ProducerTable(PRODUCER_RESULTS_KEPT, self.settings.producer_ids_max)
        self.publish()
        self._failure = None

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()
        if self._failure is not None:
            raise BrokerError("partition_failed", **self._failure)

    async def stop(self, deleted: bool = False) -> None:
        """Stop the task; queued requests fail with UNAVAILABLE; readers end,
        told the topic was deleted only when it was (else: shutting down)."""
        self._closed = True
        self.recent.clear()
        self._deleted = deleted
        self._appended.set()
        for listener in list(self.listeners):
            listener()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.threads.settle()
        # cancelled mid-group: the group in flight is answered too, as its readers are
        # (a producer told "topic deleted" stops; told "shutting down" it retries)
        fail_pending(self._in_flight, self._queue, self._closed_error)

    # ------------------------------------------------------------ produce

    def submit(self, request: pb.ProduceRequest) -> asyncio.Future[pb.ProduceResponse]:
        """Check a produce request and queue it; the future resolves once durable.

        Raises:
            BrokerError: bad batch (INVALID_ARGUMENT), a full queue, or the
                task failed and is being reopened (UNAVAILABLE, supervision).
        """
        self._check_open()
        if self.write_guard is not None:
            self.write_guard()
        try:
            validate_batch(request.batch, self.settings.event_bytes_max,
                           self.settings.batch_events_max)
        except BatchError as e:
            raise BrokerError("batch_invalid", detail=str(e)) from None
        if request.scn > SCN_SUPPLIED_MAX:
            raise BrokerError("scn_too_large", scn=request.scn, max=SCN_SUPPLIED_MAX)
        settle_slots(request.batch, self.slot_cache)
        future: asyncio.Future[pb.ProduceResponse] = asyncio.get_running_loop().create_future()
        if self._idle and self._queue.empty():
            self._commit_now(Produce(request, future, 0))
            return future
        try:
            self._queue.put_nowait(Produce(request, future, request.batch.ByteSize()))
        except asyncio.QueueFull:
            raise BrokerError("queue_full", what=f"partition {self.meta.name}/{self.index}",
                              max=self.settings.partition_queue_requests_max) from None
        return future

    async def _run(self) -> None:
        while True:
            self._in_flight = group = await self._next_group()
            produces = [c for c in group if isinstance(c, Produce)]
            if produces:
                await self._commit(produces)
            for command in group:
                if isinstance(command, Trim):
                    await self._trim(command)
                elif isinstance(command, OnTask):
                    await self._on_task(command)

    async def _next_group(self) -> list[Command]:
        """The first waiting command plus whatever else is queued, within limits; a
        request `submit` wrote itself alone (the task only waits for its fsync)."""
        self._idle = True
        try:
            first = await self._queue.get()
        finally:
            self._idle = False
        if isinstance(first, Produce) and first.synced is not None:
            return [first]
        group = [first]
        size = 0
        while (not self._queue.empty() and len(group) < self.settings.commit_requests_max
               and size < self.settings.commit_bytes_max):
            command = self._queue.get_nowait()
            size += command.size if isinstance(command, Produce) else 0
            group.append(command)
        return group

    async def _commit(self, commands: list[Produce]) -> None:
        """Decide every request, write the appends in one WriteBatch, then answer (a
        request `submit` wrote itself: wait for its fsync, as for a group of ours)."""
        synced = commands[0].synced
        if synced is None:
            synced = self._write(commands)
        if synced is not None:  # a failed fsync raises to supervision: reopen from the store
            await synced

    def _commit_now(self, command: Produce) -> None:
        """The commit, run by `submit` while the task waits for work (nothing queued,
        no group in flight). Why: a woken task runs after whatever the loop has queued
        (grpcio's completions on a busy broker; about 0.06 ms at the median following
        the tail at 10,000 events/s). Without fsync the request is durable, published
        and answered before `submit` returns. With fsync, the fsync's callback does
        that, and the request is queued for the task, which waits for the fsync
        before its next group (so requests that come meanwhile gather into one
        group, as behind a group of the task's own). Whatever this raises reaches
        the task through the same future, so supervision reopens the partition."""
        try:
            command.synced = self._write([command])
            if command.synced is None:
                return
        except Exception as e:  # the task raises it, as if it had committed the request
            command.synced = asyncio.get_running_loop().create_future()
            command.synced.set_exception(e)
            command.synced.add_done_callback(mark_seen)
        self._queue.put_nowait(command)  # the queue is empty: never full

    def _write(self, commands: list[Produce]) -> asyncio.Future[None] | None:
        """Write the group; its fsync, whose callback publishes and answers it, or None
        when nothing is left to wait for (durable and answered without fsync, or
        answered with the write's error)."""
        written = write_group(self, commands, now_ms())
        if written is None:
            return None
        if written.appends and self.store.durable:
            return request_synced(self.store.wal_syncer,
                                  functools.partial(self._durable, commands, written))
        self._durable(commands, written)
        return None

    def _durable(self, commands: list[Produce], written: Written) -> None:
        """The group is durable: readers see it (dispatchers following the tail deliver
        it at once: `publish`), then its producers are answered. After an fsync this
        runs in the fsync's callback, ahead of what the loop has queued (wal_sync.py);
        not once the partition stopped (`stop` answered the group)."""
        if self._closed:
            return
        appends, outcomes = written.appends, written.outcomes
        if appends:
            for append in appends:  # what dispatchers following the tail read next
                self.recent.add(append.base_offset, append.count, append.value)
            self.publish()
            self._produced_events.inc(sum(a.count for a in appends))
            self._produce_commits.inc()
        for command, answer in zip(commands, outcomes, strict=True):
            if command.future.done():
                continue
            if isinstance(answer, BrokerError):
                command.future.set_exception(answer)
            else:
                command.future.set_result(
                    response_of(self.meta.name, self.index, command.request, answer))

    # ------------------------------------------------------------ read

    async def read(self, spec: ReadSpec, start: int, replica: bool = False) -> Chunk:
        """One chunk from `start` (runs on a worker thread), never past the readable
        end (a follower's copy, `replica`: never past the durable log end)."""
        end = self.log_end if replica else self.end_offset
        if spec.stop_offset is None or spec.stop_offset > end:
            spec = replace(spec, stop_offset=end)
        # A reader, and a follower's copy, learn of offsets retention removed while they
        # read (Chunk.removed, see read_path.py): a copy must not skip them either.
        return await asyncio.to_thread(read_chunk, self.store, spec, start,
                                       lambda: self.removing_below)

    async def wait_for_data(self, offset: int) -> None:
        """Return once readers may see an event at `offset` (or the partition closes)."""
        while self.end_offset <= offset and not self._closed:
            await self._appended.wait()
        if self._closed:
            raise self._closed_error()

    def _closed_error(self) -> BrokerError:
        if self._deleted:
            return BrokerError("topic_deleted", topic=self.meta.name)
        return BrokerError("shutting_down")

    async def wait_for_change(self) -> None:
        """Return at the next publish, high watermark move or truncation (or close)."""
        if not self._closed:
            await self._appended.wait()
        if self._closed:
            raise self._closed_error()

    def check_truncation(self, mark: int, offset: int) -> None:
        """Raise when a truncation since `mark` (a `truncations` count taken when a
        read stream opened) cut the log below `offset`, the stream's next offset:
        the events it would read next are not the ones it was reading.

        Raises:
            BrokerError: log_truncated (OUT_OF_RANGE).
        """
        cuts = self.truncations[mark:]
        if cuts and min(cuts) < offset:
            raise BrokerError("log_truncated", topic=self.meta.name, partition=self.index,
                              offset=offset, cut=min(cuts))

    # ------------------------------------------------------------ relay hooks

    def run_on_task(self, work: Callable[[Partition], Awaitable[Any]]) -> asyncio.Future[Any]:
        """Queue `work(self)` to run on the partition task, behind queued produces.

        Raises:
            BrokerError: the partition is closed or its queue is full.
        """
        self._check_open()
        command = OnTask(work)
        try:
            self._queue.put_nowait(command)
        except asyncio.QueueFull:
            raise BrokerError("queue_full", what=f"partition {self.meta.name}/{self.index}",
                              max=self.settings.partition_queue_requests_max) from None
        return command.future

    async def _on_task(self, command: OnTask) -> None:
        self.recent.clear()  # relay appends and truncations write the log themselves
        try:
            result = await command.work(self)
        except Exception as e:
            if not command.future.done():
                command.future.set_exception(e)
            return
        if not command.future.done():
            command.future.set_result(result)

    def publish(self) -> None:
        """Make what the clock holds (durable) the log end, what the high watermark
        allows of it visible to readers, and wake them."""
        if self.clock.next_offset < self.log_end:  # a truncation
            self.truncations.append(self.clock.next_offset)
            self.recent.clear()
        self.log_end = self.clock.next_offset
        self.limit.process_log_end(self.clock.next_offset, self.clock.last_scn)
        self.end_offset, self.last_scn = self.limit.readable_end, self.limit.readable_scn
        self._wake_readers()

    def hold_back_readers(self) -> None:
        """Readers see nothing of the stored log until a high watermark is set
        (at start, on a broker of a cluster: see broker/read_limit.py)."""
        self.limit.hold_back(self.start_offset)
        self.end_offset, self.last_scn = self.limit.readable_end, self.limit.readable_scn

    def set_high_watermark(self, high_watermark: int | None) -> None:
        """Hold readers back to `high_watermark` (None: no limit, the log end);
        wakes readers (and followers' copies, which carry it on) when it moved."""
        before = (self.limit.high_watermark, self.end_offset)
        self.limit.process_high_watermark(high_watermark)
        self.end_offset, self.last_scn = self.limit.readable_end, self.limit.readable_scn
        if (self.limit.high_watermark, self.end_offset) != before:
            self._wake_readers()

    def _wake_readers(self) -> None:
        event, self._appended = self._appended, asyncio.Event()
        event.set()
        for listener in list(self.listeners):
            listener()

    @property
    def closed(self) -> bool:
        return self._closed

    def resolve_start(self, start: pb.StartPosition, unset_is_latest: bool = False) -> int:
        """The offset a StartPosition names here, or why it cannot be used
        (partition_positions.py)."""
        return positions.resolve_start(self, start, unset_is_latest)

    def removed_error(self, offset: int, found: int | None = None) -> BrokerError:
        """Offsets a read named or reached were removed by retention (partition_positions.py)."""
        return positions.removed_error(self, offset, found)

    # ------------------------------------------------------------ retention

    async def enforce_retention(self, now: int) -> int:
        """Queue a trim behind pending produces; returns the records removed
        (0 when the queue is full, the partition failed: supervision logged it, or
        it stopped: its topic deleted during the retention pass)."""
        if self._failure is not None or self._closed:
            return 0
        command = Trim(now)
        try:
            self._queue.put_nowait(command)
        except asyncio.QueueFull:
            return 0
        try:
            return await command.future
        except BrokerError as e:
            if e.kind.name == "partition_failed" or e.kind.name in PARTITION_CLOSED:
                return 0
            raise

    async def _trim(self, command: Trim) -> None:
        removed = await trim(self, command.now_ms)
        if not command.future.done():
            command.future.set_result(removed)

    def info(self) -> pb.PartitionInfo:
        """Describe's view; the start counts the cut retention is making, as an
        out-of-range error's does (a follower told its offsets were removed
        resets its copy to this start: broker/relay/follower.py)."""
        return pb.PartitionInfo(partition=self.index, start_offset=positions.stored_start(self),
                                end_offset=self.end_offset, last_scn=self.last_scn,
                                bytes=self.bytes)
