"""Log compaction of a `compacted` topic (Kafka's cleanup.policy=compact).

Rules (Kafka's guarantees, kept here):
1. The log keeps at least the latest event of every (source, key): an event
   survives while the view's entry for its key is that very event (same
   offset). A tombstone survives until delete_retention_ms after it was
   published, as long as the view keeps it.
2. Offsets and order never change: a compacted record keeps its key and the
   span of offsets it had; it holds the surviving events with their offsets
   (a *sparse* record, flag in the log header). A record left empty goes.
3. Only records the view has folded in are compacted (below the retention
   floor), never the newest record (it carries the tail across restarts).
   retention_ms / retention_bytes, when set, are the compaction lag: only the
   head they would remove is compacted (Kafka's min.compaction.lag.ms);
   unset, every record below the floor is.
4. Work is bounded per retention check (`compaction_records_max` records),
   and a cursor walks the compactable head round and round, so records
   compacted once are compacted again as later events supersede theirs
   (Kafka's cleaner re-cleans too).
5. A tombstone goes only in a round that began after the view held it
   (`settled_below`: the limit when the round began at the head): that
   round removed its key's older events before reaching it. Dropped in the
   round that first saw it, it left the older events of its key, which the
   round had passed before the delete came, in the log until the next round,
   and a reader from the start saw the deleted key alive (a probe with
   delete_retention_ms 300 found 31 of 300 keys so).

`survivors` is the pure decision; `Compactor` is the shell that runs on the
partition task (its retention command), so nothing appends meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import rocksdict

from broker.log import codec as log_codec
from broker.log.retention import plan_trim
from broker.log.rocks_store import head_records
from broker.read_path import select_events
from broker.view import codec
from broker.view.fold import entry_keys
from sdk.core.columns import expand, record_offsets
from sdk.core.pb import keybus_pb2 as pb

if TYPE_CHECKING:
    from broker.config import Settings
    from broker.partition import Partition
    from broker.view.service import PartitionView
    from broker.view.store import ViewStore


def survivors(offsets: Sequence[int], opcodes: Sequence[int], publish_time_ms: int,
              entries: Sequence[bytes | None], now_ms: int, delete_retention_ms: int,
              settled_below: int) -> list[int]:
    """Positions of a record's events that compaction keeps (rules 1 and 5). An
    entry of None: the view holds nothing for the key (its tombstone was swept)."""
    keep: list[int] = []
    tombstone_deadline = now_ms - delete_retention_ms
    for i, (offset, value) in enumerate(zip(offsets, entries, strict=True)):
        unsettled = opcodes[i] == pb.DELETE and offset >= settled_below
        if value is None:
            if unsettled:  # swept from the view, but its key's older events may remain
                keep.append(i)
            continue
        if codec.entry_offset(value) != offset:
            continue
        if opcodes[i] == pb.DELETE and publish_time_ms <= tombstone_deadline and not unsettled:
            continue
        keep.append(i)
    return keep


@dataclass(frozen=True, slots=True)
class Rewrite:
    """What compaction does to one stored record."""

    base_offset: int
    scn_first: int
    value: bytes | None  # None: delete the record
    bytes_removed: int


class Compactor:
    """Compacts one partition's head, a bounded number of records per call."""

    def __init__(self, views: ViewStore, partition: Partition, view: PartitionView,
                 settings: Settings) -> None:
        self.views = views
        self.partition = partition
        self.view = view
        self.settings = settings
        self.cursor = 0  # the next record to look at; wraps to the head
        self.settled_below: int | None = None  # rule 5; None: no round began yet

    async def compact(self, floor: int | None, now_ms: int) -> tuple[int, int]:
        """One bounded compaction step; returns (start_offset, bytes removed)."""
        return await self.partition.threads.run(self._compact, floor, now_ms)

    def _limit(self, floor: int | None, now_ms: int) -> int:
        """The first offset not to compact (rule 3)."""
        p, meta = self.partition, self.partition.meta
        limit = p.end_offset if floor is None else floor
        if meta.retention_ms or meta.retention_bytes:
            plan = plan_trim(head_records(p.store, meta.topic_id, p.index), now_ms,
                             meta.retention_ms, meta.retention_bytes, p.bytes)
            limit = min(limit, plan.stop_offset if plan is not None else 0)
        return limit

    def _compact(self, floor: int | None, now_ms: int) -> tuple[int, int]:
        p = self.partition
        limit = self._limit(floor, now_ms)
        if self.settled_below is None or self.cursor >= limit or self.cursor < p.start_offset:
            self.cursor = p.start_offset  # a new round (rule 5)
            self.settled_below = limit
        rewrites: list[Rewrite] = []
        from_head = self.cursor == p.start_offset
        records = self._head(self.cursor, limit)
        for base, value, _ in records:
            rewrite = self._rewrite(base, value, now_ms, self.settled_below)
            if rewrite is not None:
                rewrites.append(rewrite)
        self.cursor = records[-1][2] if records else limit
        start = self._new_start(records, rewrites) if from_head else p.start_offset
        removed = sum(r.bytes_removed for r in rewrites)
        if rewrites:
            self._write(rewrites, start, p.bytes - removed)
        return start, removed

    def _head(self, start: int, limit: int) -> list[tuple[int, bytes, int]]:
        """(base, value, end) of records from `start` that end at or below
        `limit`, never the newest record."""
        p, meta = self.partition, self.partition.meta
        found: list[tuple[int, bytes, int]] = []
        for base, value in p.store.records_from(meta.topic_id, p.index, start):
            end = base + log_codec.decode_header(value).count
            if end <= start:
                continue
            if end > limit or end >= p.end_offset:
                break
            found.append((base, bytes(value), end))
            if len(found) >= self.settings.compaction_records_max:
                break
        return found

    def _rewrite(self, base: int, value: bytes, now_ms: int, settled_below: int) -> Rewrite | None:
        header = log_codec.decode_header(value)
        record = pb.Record.FromString(log_codec.record_bytes(value))
        batch = record.batch
        p = self.partition
        keys = entry_keys(codec.entries_prefix(p.meta.topic_id, p.index), batch)
        keep = survivors(record_offsets(record), expand(batch.opcodes, batch.count, pb.UPSERT),
                         header.publish_time_ms, self.views.get_entries(keys), now_ms,
                         self.view.delete_retention_ms, settled_below)
        if len(keep) == batch.count:
            return None
        if not keep:
            return Rewrite(base, header.scn_first, None, len(value))
        body = select_events(record, keep).SerializeToString()
        new_value = log_codec.encode_record(body, header.publish_time_ms, header.count,
                                            header.scn_first, header.window, sparse=True)
        return Rewrite(base, header.scn_first, new_value, len(value) - len(new_value))

    def _new_start(self, records: list[tuple[int, bytes, int]], rewrites: list[Rewrite]) -> int:
        """The partition's start after deleting emptied records at its head."""
        start = self.partition.start_offset
        deleted = {r.base_offset for r in rewrites if r.value is None}
        for base, _, end in records:
            if base not in deleted:
                return base
            start = end
        return start

    def _write(self, rewrites: list[Rewrite], start_offset: int, size: int) -> None:
        p = self.partition
        topic_id, index = p.meta.topic_id, p.index
        log_family, _ = p.store.column_family("log")
        scn_family, _ = p.store.column_family("scn_index")
        state_family, _ = p.store.column_family("partitions")
        batch = rocksdict.WriteBatch(raw_mode=True)
        for r in rewrites:
            key = log_codec.log_key(topic_id, index, r.base_offset)
            if r.value is None:
                batch.delete(key, log_family)
                batch.delete(log_codec.log_key(topic_id, index, r.scn_first), scn_family)
            else:
                batch.put(key, r.value, log_family)
        batch.put(log_codec.prefix(topic_id, index),
                  log_codec.PARTITION_STATE.pack(start_offset, size), state_family)
        p.store.write(batch, sync=p.settings.fsync)
