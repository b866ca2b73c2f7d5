"""A follower's log: append upstream records as they are; drop a tail the leader lacks.

Rules:
1. Whole records only. An upstream record is one produce call (a batch or a
   consistency window); it is stored with its own offsets, SCNs, publish time,
   producer id and leader epoch, so a consumer can move between brokers by
   offset or SCN and see the same stream. A subset record (a filtered read)
   is refused: filters apply to this broker's own readers, never to the copy.
2. Records continue the log: the first one starts at the partition's next
   offset (or, while the log is empty, at any later offset: the upstream's
   retention may have removed the beginning) and SCNs increase. Anything else
   is `ReplicaError` and nothing is stored. The broker trusts no field: the
   batch is validated and its slots checked as a produce's would be.
3. One WriteBatch per call (the records of one upstream read, whole windows),
   with the producer state they carry; the position saved is the log end,
   so it always falls on a window end (the seed's MaxSCN rule).
4. Truncation drops whole records from the one holding the given offset to
   the end, rewinds producer state to what the remaining records carry, and
   is written synced before anything else happens on the partition.
5. A log the upstream's retention overtook (the upstream's start is past this
   log's end: offsets were removed there before they were copied) is emptied
   and goes on from the upstream's start (`restart_at`, Kafka's reset to the
   leader's log start offset). The removed offsets are announced first
   (`removing_below`), so this broker's readers get OUT_OF_RANGE for them, as
   the upstream's do, never a silent gap; so does a log empty at an earlier
   offset whose first record comes later (rule 2).
6. A truncation at or below the log's start drops the whole log, and the log
   starts over as a new partition's: empty at offset 0, no SCN, producer
   state or removed offsets, its high watermark at 0 (Kafka's
   truncateFullyAndStartAt; a topic deleted and created again upstream is a
   new topic). The copy then takes the upstream's log from its start, as a
   new follower's does (rules 2 and 5), whatever this log's start was: kept
   at it, an upstream log starting below it could never continue it.

`plan_replica` is the pure part; `replicate`, `truncate` and `restart_at` run on the
partition task (`Partition.run_on_task`); `last_epoch` and `epoch_end` are
blocking reads for a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from broker.derived import settle_slots
from broker.log import codec
from broker.log.rocks_store import Append, RocksStore
from broker.log.wal_sync import wait_synced
from broker.partition import Partition
from broker.windows import PartitionClock
from sdk.core.columns import BatchError, validate_batch
from sdk.core.pb import keybus_pb2 as pb


class ReplicaError(Exception):
    """Upstream records that do not continue this log (rule 2); nothing was stored."""


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    """What one call stores (rule 3)."""

    appends: list[Append]
    results: list[tuple[int, codec.ProducerResult]]  # (producer id, result), in log order
    next_offset: int
    last_scn: int
    start_offset: int
    events: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Restart:
    """What a restart at the upstream's start replaced (for the log line)."""

    start_before: int
    end_before: int
    start: int


@dataclass(frozen=True, slots=True)
class Truncation:
    """What a truncation dropped (for the log line)."""

    offset: int
    end_before: int
    records: int
    events: int
    scn_first: int
    scn_last: int


def plan_replica(records: Sequence[pb.Record], clock: PartitionClock, start_offset: int,
                 event_bytes_max: int, batch_events_max: int) -> ReplicaPlan:
    """Check upstream records against the partition's clock (rules 1-3). Pure.

    Raises:
        ReplicaError: naming the first record that does not fit and why.
    """
    next_offset, last_scn = clock.next_offset, clock.last_scn
    empty = next_offset == start_offset
    appends: list[Append] = []
    results: list[tuple[int, codec.ProducerResult]] = []
    events = size = 0
    for record in records:
        where = f"upstream record {record.topic}/{record.partition} at offset {record.base_offset}"
        count = record.batch.count
        if record.offsets:
            raise ReplicaError(f"{where} is a subset (filtered read); a follower copies whole records")
        if record.base_offset != next_offset:
            if not (empty and not appends and record.base_offset > next_offset):
                raise ReplicaError(f"{where} does not continue the log, whose next offset is "
                                   f"{next_offset}")
            next_offset = start_offset = record.base_offset
        if record.scn_first <= last_scn:
            raise ReplicaError(f"{where} has scn {record.scn_first}, not above the last SCN "
                               f"{last_scn}")
        try:
            validate_batch(record.batch, event_bytes_max, batch_events_max)
        except BatchError as e:
            raise ReplicaError(f"{where}: {e}") from None
        if count == 0:
            raise ReplicaError(f"{where} has no events; a stored record has at least one")
        append = Append.of_record(record)
        appends.append(append)
        if record.producer_id:
            results.append((record.producer_id, codec.ProducerResult(
                record.sequence, record.base_offset, count, record.scn_first, record.window,
                record.publish_time_ms)))
        next_offset = record.base_offset + count
        last_scn = record.scn_first if record.window else record.scn_first + count - 1
        events += count
        size += len(append.value)
    return ReplicaPlan(appends, results, next_offset, last_scn, start_offset, events, size)


async def replicate(partition: Partition, records: Sequence[pb.Record]) -> ReplicaPlan:
    """Append whole upstream records (runs on the partition task; rules 1-3).

    Raises:
        ReplicaError: nothing was stored. Storage errors propagate (nothing visible changed).
    """
    settings = partition.settings
    for record in records:  # the slots a leader stored are checked again, as a produce's are
        settle_slots(record.batch, partition.slot_cache)
    plan = plan_replica(records, partition.clock, partition.start_offset,
                        settings.event_bytes_max, settings.batch_events_max)
    if not plan.appends:
        return plan
    store, topic_id, index = partition.store, partition.meta.topic_id, partition.index
    producers = partition.producers
    states: dict[int, bytes] = {}
    for producer_id, result in plan.results:
        if not producers.known(producer_id):
            stored = store.load_producer(topic_id, index, producer_id)
            if stored is not None:
                producers.load(producer_id, codec.decode_producer_results(stored))
        producers.commit(producer_id, result)
        states[producer_id] = producers.encoded(producer_id)
    if plan.start_offset > partition.start_offset:  # rule 5: a reader at the old start
        partition.removing_below = max(partition.removing_below, plan.start_offset)
    saved_clock = partition.clock
    partition.clock = PartitionClock(plan.next_offset, plan.last_scn)  # ahead of the write, as _commit
    try:
        # Written without sync, then fsynced on the store's WAL syncer: rocksdict's synced
        # write would hold the GIL, and so stop this follower's loop, through the fsync.
        # On the partition's worker threads: a stop (its topic deleted) waits for the write.
        await partition.threads.run(functools.partial(
            store.append, topic_id, index, plan.appends, states, plan.start_offset,
            partition.bytes + plan.bytes, sync=False))
        if store.durable:
            await wait_synced(store.wal_syncer)
    except Exception:
        partition.clock = saved_clock
        producers.forget(list(states))  # reloaded from disk on next use
        raise
    partition.start_offset = plan.start_offset
    partition.bytes += plan.bytes
    partition.publish()
    return plan


async def truncate(partition: Partition, offset: int,
                   before_publish: Callable[[int], Awaitable[None]] | None = None
                   ) -> Truncation | None:
    """Drop every record from the one holding `offset` to the end (rule 4).

    Runs on the partition task. `before_publish(new_end)` runs after the
    write and before readers are woken (subscriptions move their cursors
    back there first). Returns None when nothing is past `offset`. At or
    below the log's start, the log starts over at 0 (rule 6).
    """
    if offset >= partition.clock.next_offset:
        return None
    if offset <= partition.start_offset:
        return await _start_over(partition, before_publish)
    store, topic_id, index = partition.store, partition.meta.topic_id, partition.index
    found = await asyncio.to_thread(_tail_from, store, topic_id, index, offset)
    cut, previous_scn, dropped, events, size, scn_first, scn_last = found
    states = await asyncio.to_thread(store.producer_states, topic_id, index)
    rewritten: dict[int, bytes | None] = {}
    for producer_id, state in states.items():
        results = codec.decode_producer_results(state)
        kept = [r for r in results if r.base_offset < cut]
        if len(kept) != len(results):
            rewritten[producer_id] = codec.encode_producer_results(kept) if kept else None
    start = min(partition.start_offset, cut)
    end_before = partition.clock.next_offset
    await partition.threads.run(store.truncate, topic_id, index, cut, scn_first, rewritten,
                                start, max(partition.bytes - size, 0))
    partition.producers.forget(list(rewritten))
    partition.clock = PartitionClock(cut, previous_scn if previous_scn is not None else scn_first - 1)
    partition.start_offset = start
    partition.bytes = max(partition.bytes - size, 0)
    if before_publish is not None:
        await before_publish(cut)
    partition.publish()
    return Truncation(cut, end_before, dropped, events, scn_first, scn_last)


async def start_over(partition: Partition,
                     before_publish: Callable[[int], Awaitable[None]] | None = None
                     ) -> Truncation | None:
    """Rule 6 for a topic deleted and created again upstream (incarnation.py): drop
    the log, empty or not, and start it again at 0; None when it is empty at 0.
    Runs on the partition task."""
    if partition.clock.next_offset == 0:
        return None
    return await _start_over(partition, before_publish)


async def _start_over(partition: Partition,
                      before_publish: Callable[[int], Awaitable[None]] | None) -> Truncation:
    """Drop the whole log and start it again empty at offset 0 (rule 6), written
    synced; what was dropped, for the log line (no records: an empty log at a
    later offset)."""
    store, topic_id, index = partition.store, partition.meta.topic_id, partition.index
    start, end_before = partition.start_offset, partition.clock.next_offset
    found = (await asyncio.to_thread(_tail_from, store, topic_id, index, start)
             if end_before > start else (start, None, 0, 0, 0, 0, 0))
    _, _, dropped, events, _, scn_first, scn_last = found
    states = await asyncio.to_thread(store.producer_states, topic_id, index)
    await partition.threads.run(store.truncate, topic_id, index, 0, 0,
                                dict.fromkeys(states), 0, 0)
    partition.producers.forget(list(states))
    partition.clock = PartitionClock(0, 0)
    partition.start_offset = partition.bytes = partition.removing_below = 0
    if partition.limit.high_watermark is not None:  # the old log's; the upstream sends anew
        partition.limit.process_high_watermark(0)  # readers see it at the publish below
    if before_publish is not None:
        await before_publish(0)
    partition.publish()
    return Truncation(start, end_before, dropped, events, scn_first, scn_last)


async def restart_at(partition: Partition, start: int) -> Restart | None:
    """Empty the log and go on from `start`, the upstream's start offset, when it
    is past the log end (rule 5). Runs on the partition task; the delete is
    written synced (as retention's). Returns None when the log reaches `start`."""
    end = partition.clock.next_offset
    if start <= end:
        return None
    restart = Restart(partition.start_offset, end, start)
    partition.removing_below = start  # before the delete: a read that meets it says so
    store, topic_id, index = partition.store, partition.meta.topic_id, partition.index
    last_scn = partition.clock.last_scn
    await partition.threads.run(store.trim, topic_id, index, start, last_scn + 1, start, 0)
    partition.clock = PartitionClock(start, last_scn)  # upstream SCNs past `start` are higher
    partition.start_offset = start
    partition.bytes = 0
    partition.publish()
    return restart


def _tail_from(store: RocksStore, topic_id: int, partition: int, offset: int
               ) -> tuple[int, int | None, int, int, int, int, int]:
    """(cut offset, SCN of the record before it, records, events, bytes, first and
    last SCN dropped) for a truncation at `offset`."""
    cut: int | None = None
    records = events = size = 0
    scn_first = scn_last = 0
    for base, value in store.records_from(topic_id, partition, offset):
        header = codec.decode_header(value)
        if base + header.count <= offset:
            continue
        if cut is None:
            cut, scn_first = base, header.scn_first
        records += 1
        events += header.count
        size += len(value)
        scn_last = header.scn_last
    assert cut is not None, "truncate below the end found no record"
    previous = None
    if cut > 0:
        for base, value in store.records_from(topic_id, partition, cut - 1):
            if base < cut:
                previous = codec.decode_header(value).scn_last
            break
    return cut, previous, records, events, size, scn_first, scn_last


def record_epoch(value: bytes) -> int:
    """The leader epoch of a stored record."""
    return int(pb.Record.FromString(codec.record_bytes(value, verify=False)).leader_epoch)


def last_epoch(store: RocksStore, topic_id: int, partition: int, end_offset: int) -> int:
    """The leader epoch of the last record before end_offset (0 when none). Blocking."""
    if end_offset == 0:
        return 0
    for base, value in store.records_from(topic_id, partition, end_offset - 1):
        return record_epoch(value) if base < end_offset else 0
    return 0


def epoch_end(store: RocksStore, topic_id: int, partition: int, start_offset: int,
              end_offset: int, epoch: int) -> int:
    """The first offset of the first record with a leader epoch above `epoch`, or
    end_offset when there is none: where a follower whose last record has epoch
    `epoch` stops agreeing with this log. Binary search over records
    (epochs never decrease along a log). Blocking."""
    low, high = start_offset, end_offset
    while low < high:
        middle = (low + high) // 2
        base, value = next(iter(store.records_from(topic_id, partition, middle)))
        count = codec.decode_header(value).count
        if base + count <= middle:  # a gap (cannot happen in a dense log): step past it
            low = base + count
            continue
        if record_epoch(value) > epoch:
            high = base
        else:
            low = base + count
    return low
