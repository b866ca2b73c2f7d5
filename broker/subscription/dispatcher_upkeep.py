"""A dispatcher's writes beside its rounds: dead letters and the cursor.

Both run on tasks of their own so no delivery waits for them, one at a time each;
their end wakes the round. A seek (`seek_together`) writes several partitions'
cursors in one batch and moves their cores once it landed. `PartitionDispatcher`
(dispatcher.py) takes them in as a base class; what they use of it is declared below.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from broker.log.rocks_store import RocksStore
from broker.metrics import DEAD_LETTER_FAILED_EVENTS
from broker.partition import Partition, now_ms
from broker.subscription.consumer_state import Session
from broker.subscription.core import PartitionCore
from broker.subscription.core_types import Send
from broker.subscription.cursor import Cursor
from broker.subscription.delivery import RecordCache
from broker.subscription.holdings import Taken
from broker.subscription.log_reader import read_records_holding
from broker.subscription.spec import SubscriptionSpec
from sdk.core.pb import keybus_pb2 as pb

log = logging.getLogger("keybus.dispatch")
DeadLetterSink = Callable[[SubscriptionSpec, list[bytes]], Awaitable[None]]


class ForwardsDeadLetters(Protocol):
    """Where dead letters go for a topic this broker copies but does not lead
    (`broker/relay/dead_letter_forward.py`): the subscription layer knows no relay."""

    def leader_of(self, topic: str) -> str | None: ...

    async def write(self, leader: str, requests: list[pb.ProduceRequest]) -> int: ...


class DispatcherUpkeep:
    """Dead letters and cursor writes of one `PartitionDispatcher`."""

    spec: SubscriptionSpec
    partition: Partition
    index: int
    store: RocksStore
    core: PartitionCore
    cache: RecordCache
    persisted_mark_delete: int
    persisted_acked_ranges: int
    _wake: asyncio.Event
    _dead_letter_sink: DeadLetterSink
    _dead_letter_task: asyncio.Task[None] | None
    _persist_task: asyncio.Task[None] | None
    _last_persist_ms: int
    _cache_floor: int
    sessions: dict[str, Session]
    _unsent: list[tuple[Send, int]]

    # ------------------------------------------------------------ dead letters

    def _start_dead_letters(self) -> None:
        if self._dead_letter_task is not None and not self._dead_letter_task.done():
            return
        dead = self.core.take_dead_letters()
        if len(dead):
            self._dead_letter_task = asyncio.get_running_loop().create_task(
                self._dead_letter(dead))

    async def _dead_letter(self, dead: Taken) -> None:
        ok = False
        try:
            missing = self.cache.missing(dead.offsets)
            for record in await asyncio.to_thread(
                    read_records_holding, self.store, self.partition.meta.topic_id,
                    self.index, missing.tolist()):
                self.cache.add(record)
            records = []
            offsets = dead.offsets.tolist()
            i = 0
            while i < len(offsets):
                entry = self.cache.find(offsets[i])
                j = i + 1
                while entry is not None and j < len(offsets) and offsets[j] < entry.end:
                    j += 1
                if entry is not None:
                    records.append(entry.subset_bytes([o - entry.base for o in offsets[i:j]]))
                i = j
            await self._dead_letter_sink(self.spec, records)
            ok = True
        except Exception as e:  # retried through the normal path: the key stays held
            DEAD_LETTER_FAILED_EVENTS.labels(self.spec.topic, self.spec.name).inc(len(dead))
            log.warning("dead-letter of %d events of %s/%d/%s failed, redelivering: %s",
                        len(dead), self.spec.topic, self.index, self.spec.name, e)
        self.core.process_dead_lettered(dead, ok, now_ms())
        self._wake.set()

    # ------------------------------------------------------------ seeks

    def tell_seeked(self, offset: int) -> None:
        """After the core moved: forget the sends decided before the seek that did
        not go out (their permits come back), and tell every attached consumer, in
        its stream after whatever it was sent from the old position. Without it the
        SDK handed out what it had buffered from before the seek, up to its
        receiver queue: a seek to latest still delivered some 2,000 old events."""
        for send, _ in self._unsent:
            self.core.process_unsent(send.consumer, len(send.events.offsets))
        self._unsent = []
        message = pb.SubscribeResponse(seeked=pb.Seeked(partition=self.index, offset=offset))
        data = message.SerializeToString()
        for session in self.sessions.values():
            session.send(data)

    # ------------------------------------------------------------ persistence

    def _persist_in_background(self, now: int) -> None:
        """Write the cursor on a task of its own, so no delivery waits for the write
        (one write at a time: a round that finds one in flight leaves the cursor dirty,
        and the write's end wakes the round to look again)."""
        if self._persist_task is not None and not self._persist_task.done():
            return
        cursor = self.core.snapshot()
        self._last_persist_ms = now
        self._persist_task = asyncio.get_running_loop().create_task(
            self._write_cursor(cursor, background=True))

    async def _persist_settled(self) -> None:
        """Wait for a background cursor write, so a later one never lands before it."""
        task = self._persist_task
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            self._persist_task = None

    async def _persist(self, now: int) -> None:
        """Write the cursor now (seek, stop): after any background write."""
        await self._persist_settled()
        cursor = self.core.snapshot()
        self._last_persist_ms = now
        await self._write_cursor(cursor)

    async def _write_cursor(self, cursor: Cursor, background: bool = False) -> None:
        try:
            await asyncio.to_thread(self.store.put_cursors, self.partition.meta.topic_id,
                                    self.spec.name, {self.index: cursor.to_bytes()})
        except Exception:
            if not background:
                raise
            log.exception("writing the cursor of %s/%d/%s failed; retrying", self.spec.topic,
                          self.index, self.spec.name)
            self.core.dirty = True  # written again at the next persist interval
            self._wake.set()
            return
        self.written(cursor)
        if background and self.core.dirty:
            self._wake.set()  # changed meanwhile: the round persists again when due

    def written(self, cursor: Cursor) -> None:
        """`cursor` is on disk: what DescribeSubscription reports as persisted."""
        self.persisted_mark_delete = cursor.mark_delete
        self.persisted_acked_ranges = cursor.acked_range_count()
        # The records wholly below it go at the round's next trim (never between the
        # round's cache look-ups and its sends, which this write may land between).
        self._cache_floor = cursor.mark_delete


async def seek_together(store: RocksStore, dispatchers: Sequence[DispatcherUpkeep],
                        offsets: Sequence[int]) -> None:
    """Seek one subscription on several partitions (`dispatchers[i]` to `offsets[i]`):
    write the cursors the seek leaves in one WriteBatch, then move the cores. All or
    nothing, on disk and in what consumers are sent.

    Why: written partition by partition (one awaited write each), a broker killed
    between two writes came back with some partitions moved and the others not. And
    with the cores moved before the write, a write that failed answered an error while
    the consumers were already sent the events from the seek's position, and the next
    background cursor write stored the seek after all. Rules:
    1. The write comes first; the cores move only once it landed, all in one step (no
       await between them), so no round and no consumer call sees some partitions
       moved and others not, and a consumer attached meanwhile is sent from the old
       position until then, as any other. A write that fails leaves the cores as they
       were (not marked dirty by the seek): the caller gets the error, delivery goes
       on from where it was, and no later write stores the seek.
    2. A background cursor write in flight holds a cursor from before the seek: it
       lands first.
    3. Until the seek's write lands and the cores moved it is every dispatcher's
       `_persist_task`: no background write starts (it would write the old position
       over the seek's, or one partition's ahead of the rest), a stop (the
       subscription or its topic deleted) waits for it, so it never lands after their
       keys are deleted, and a supervision restart waits for it, so it reads the
       seek's cursor if the seek applies and the old one if it failed.
    4. It runs to the end even if the caller goes away: a write that landed moves
       the cores.
    """
    earlier = [d._persist_task for d in dispatchers if d._persist_task is not None]
    write = asyncio.get_running_loop().create_task(
        _seek_written(store, dispatchers, offsets, earlier))
    now = now_ms()
    for dispatcher in dispatchers:
        dispatcher._persist_task = write
        dispatcher._last_persist_ms = now
    await asyncio.shield(write)


async def _seek_written(store: RocksStore, dispatchers: Sequence[DispatcherUpkeep],
                        offsets: Sequence[int], earlier: list[asyncio.Task[None]]) -> None:
    for task in earlier:  # rule 2
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    cursors = [PartitionCore.seek_cursor(offset) for offset in offsets]
    first = dispatchers[0]
    try:
        await asyncio.to_thread(store.put_cursors, first.partition.meta.topic_id, first.spec.name,
                                {d.index: c.to_bytes() for d, c in zip(dispatchers, cursors,
                                                                       strict=True)})
    finally:
        for dispatcher in dispatchers:
            dispatcher._wake.set()  # a failed write: the rounds go on as they were
    for dispatcher, offset, cursor in zip(dispatchers, offsets, cursors, strict=True):  # rule 1
        core = dispatcher.core  # (a supervision restart waits for this task: never swapped)
        core.process_seek(offset)
        dispatcher.cache.clear()
        dispatcher.tell_seeked(offset)
        # what was written is the moved core's cursor: nothing left to write for the seek
        core.dirty = core.snapshot().to_bytes() != cursor.to_bytes()
        dispatcher.written(cursor)
