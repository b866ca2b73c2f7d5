"""Compaction never leaves a deleted key's older event in the log without its tombstone.

Goal: compaction.py rule 5. The compaction cursor walks the head round and
round; a delete that comes after the round passed its key's older event was
dropped (expired) when the same round reached it, so until the next round
the log held the older event alone: a reader from the start saw the deleted
key alive (a broker probe with delete_retention_ms 300 found 31 of 300 keys
so). Now a tombstone goes only in a round that began after the view held it.
Method: a real RocksDB store and view (temp dir); the `Compactor` driven one
record per step over a small partition (a plain object with the fields it
reads), a delete appended mid-round; after every step the log is folded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from broker.log import codec as log_codec
from broker.log.rocks_store import Append, RocksStore
from broker.partition import TopicMeta
from broker.view import codec
from broker.view.compaction import Compactor, survivors
from broker.view.store import ViewStore
from sdk.core.columns import record_events
from sdk.core.pb import keybus_pb2 as pb

NOW_MS = 100_000  # every record was published at 1: every tombstone has expired
DELETE_RETENTION_MS = 1_000


class Threads:
    async def run(self, work: Callable[..., Any], *args: Any) -> Any:
        return work(*args)


def _append(store: RocksStore, partition: SimpleNamespace, key: int, opcode: int) -> None:
    offset = partition.end_offset
    batch = pb.EventBatch(count=1, key_ints=[key], sources=["s"], opcodes=[opcode],
                          values=[b"" if opcode == pb.DELETE else b"v%d" % offset])
    record = pb.Record(topic="t", partition=0, base_offset=offset, scn_first=offset + 1,
                       publish_time_ms=1, batch=batch)
    store.append(1, 0, [Append.of_record(record)], {}, partition.start_offset, 0)
    partition.end_offset += 1


def _alive(store: RocksStore) -> set[int]:
    """The keys a reader from the start finds alive: the log folded."""
    state: dict[int, int] = {}
    for _, value in store.records_from(1, 0, 0):
        for event in record_events(pb.Record.FromString(log_codec.record_bytes(value))):
            state[event.key] = event.opcode  # type: ignore[index]
    return {key for key, opcode in state.items() if opcode != pb.DELETE}


def test_a_tombstone_goes_only_after_its_keys_older_events(tmp_path: Path) -> None:
    store = RocksStore(str(tmp_path / "db"), fsync=False)
    try:
        views = ViewStore(store)
        meta = TopicMeta("t", 1, 1, 0, 0, 0, view=True, compacted=True,
                         delete_retention_ms=DELETE_RETENTION_MS)
        partition = SimpleNamespace(store=store, meta=meta, index=0, start_offset=0,
                                    end_offset=0, bytes=1 << 20, threads=Threads(),
                                    settings=SimpleNamespace(fsync=False))
        view = SimpleNamespace(delete_retention_ms=DELETE_RETENTION_MS)
        compactor = Compactor(views, partition, view,  # type: ignore[arg-type]
                              SimpleNamespace(compaction_records_max=1))  # type: ignore[arg-type]

        def step() -> None:
            views.fold_pass(1, 0, partition.end_offset, 1_000)  # the view keeps up
            partition.start_offset, removed = asyncio.run(
                compactor.compact(partition.end_offset, NOW_MS))
            partition.bytes -= removed  # as partition_trim.py does

        for key in (1, 2, 3, 4):
            _append(store, partition, key, pb.UPSERT)
        step()  # the round passes key 1's upsert while it is the latest: kept
        assert compactor.cursor == 1
        _append(store, partition, 1, pb.DELETE)  # offset 4
        _append(store, partition, 5, pb.UPSERT)  # the newest record is never compacted
        for _ in range(12):  # the rest of this round, and the next ones
            step()
            assert 1 not in _alive(store), "the deleted key 1 is alive in the log"
        remaining = {e.key for _, v in store.records_from(1, 0, 0)
                     for e in record_events(pb.Record.FromString(log_codec.record_bytes(v)))}
        assert 1 not in remaining  # the next round removed the upsert, then the tombstone
    finally:
        store.close()


def test_survivors_keep_a_tombstone_of_the_round_that_began_before_it() -> None:
    tombstone = codec.encode_entry(12, 12, 0, 0, 0, pb.DELETE, b"", b"", b"", b"")
    offsets, opcodes = [12, 13], [pb.DELETE, pb.DELETE]
    entries = [tombstone, None]  # 13: its tombstone was swept from the view already
    expired = dict(publish_time_ms=1_000, now_ms=5_000, delete_retention_ms=1_000)
    assert survivors(offsets, opcodes, entries=entries, settled_below=12, **expired) == [0, 1]
    assert survivors(offsets, opcodes, entries=entries, settled_below=13, **expired) == [1]
    assert survivors(offsets, opcodes, entries=entries, settled_below=14, **expired) == []
