"""A dispatcher's writes beside its rounds: dead letters and the cursor.

Both run on tasks of their own so no delivery waits for them, one at a time each;
their end wakes the round. A seek (`seek_together`) moves several partitions'
cursors and writes them in one batch. `PartitionDispatcher` (dispatcher.py) takes them in as a
base class; what they use of it is declared below.
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
from broker.subscription.core import PartitionCore
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
    """Move the cursors of one subscription on several partitions (`dispatchers[i]`
    to `offsets[i]`) and write them in one WriteBatch: on disk all of them or none.

    Why: written partition by partition (one awaited write each), a broker killed
    between two writes came back with some partitions moved and the others not, a
    SeekSubscription that failed for its caller yet was half done. Rules:
    1. The cores move in one step (no await between them), so no round and no
       consumer call sees some partitions moved and others not.
    2. A background cursor write in flight holds a cursor from before the seek: it
       lands first.
    3. Until the seek's write lands it is every dispatcher's `_persist_task`: no
       background write starts (one partition's newer cursor landing before the
       seek's would be half of it on disk), and a stop (the subscription or its
       topic deleted) waits for it, so it never lands after their keys are deleted.
    4. It runs to the end even if the caller goes away: the cores moved already.
    """
    earlier = [d._persist_task for d in dispatchers if d._persist_task is not None]
    for dispatcher, offset in zip(dispatchers, offsets, strict=True):
        dispatcher.core.process_seek(offset)
        dispatcher.cache.clear()
    write = asyncio.get_running_loop().create_task(_write_seek(store, dispatchers, earlier))
    now = now_ms()
    for dispatcher in dispatchers:
        dispatcher._persist_task = write
        dispatcher._last_persist_ms = now
    await asyncio.shield(write)


async def _write_seek(store: RocksStore, dispatchers: Sequence[DispatcherUpkeep],
                      earlier: list[asyncio.Task[None]]) -> None:
    for task in earlier:  # rule 2
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    cursors = [d.core.snapshot() for d in dispatchers]
    first = dispatchers[0]
    try:
        await asyncio.to_thread(store.put_cursors, first.partition.meta.topic_id, first.spec.name,
                                {d.index: c.to_bytes() for d, c in zip(dispatchers, cursors,
                                                                       strict=True)})
    except Exception:
        for dispatcher in dispatchers:
            dispatcher.core.dirty = True  # the rounds write them again
        raise
    finally:
        for dispatcher in dispatchers:
            dispatcher._wake.set()
    for dispatcher, cursor in zip(dispatchers, cursors, strict=True):
        dispatcher.written(cursor)
