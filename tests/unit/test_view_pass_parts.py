"""A view pass written in parts: as safe as one WriteBatch (broker/view/store.py).

Goal: rules 1-4 of store.py hold. A crash after any part leaves a view that
the next pass finishes to exactly the view written in one go (entries,
tombstone index and counts); a snapshot read between parts, plus the log
from its offset, gives every key's latest event; a pass whose log records are
gone makes the view start over; the sweep waits for a cut pass.
Method: a real RocksDB store (temp dir) with a small `puts_per_write`; the
crash is the store's `write` raising after k calls, for every k.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log import codec as log_codec
from broker.log.rocks_store import Append, RocksStore
from broker.view import codec
from broker.view.snapshot import Position, SnapshotCursor, SnapshotSpec
from broker.view.store import ViewStore
from sdk.core.columns import record_events
from sdk.core.pb import keybus_pb2 as pb

PUTS = 5  # puts per part: a pass below takes several parts
FIRST_END = 30  # the first pass folds [0, 30)
LOG_END = 120


class Crash(Exception):
    """The store's write failing as a process would die: nothing after it."""


def _record(base: int, keys: list[int], opcodes: list[int]) -> pb.Record:
    batch = pb.EventBatch(count=len(keys), key_ints=keys, sources=["s"],
                          values=[b"v%d" % (base + i) for i in range(len(keys))], opcodes=opcodes)
    return pb.Record(topic="t", partition=0, base_offset=base, scn_first=base + 100,
                     publish_time_ms=1_000, batch=batch)


def _records() -> list[pb.Record]:
    """Four records of 30 events over 45 keys, with deletes and keys seen again."""
    out = []
    for n, base in enumerate(range(0, LOG_END, 30)):
        keys = [(base + 7 * i) % 45 for i in range(30)]
        opcodes = [pb.DELETE if (i + n) % 5 == 0 else pb.UPSERT for i in range(30)]
        out.append(_record(base, keys, opcodes))
    return out


def _store(path: Path) -> RocksStore:
    store = RocksStore(str(path), fsync=False)
    appends = []
    for r in _records():
        body = r.SerializeToString()
        appends.append(Append(r.base_offset, r.scn_first, r.batch.count, False,
                              log_codec.encode_record(body, 1_000, r.batch.count, r.scn_first,
                                                      False)))
    store.append(1, 0, appends, {}, 0, 0)
    return store


def _dump(views: ViewStore) -> list[tuple[bytes, bytes]]:
    it = views.iterator()
    it.seek_to_first()
    found = []
    while it.valid():
        found.append((bytes(it.key()), bytes(it.value())))
        it.next()
    return found


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[list[tuple[bytes, bytes]]]:
    """The view after both passes, each written in one part."""
    store = _store(tmp_path / "reference")
    views = ViewStore(store, slice_size=1_000)
    views.fold_pass(1, 0, FIRST_END, 1_000)
    views.fold_pass(1, 0, LOG_END, 1_000)
    yield _dump(views)
    store.close()


class CrashingWrites:
    """The store's `write`, counted, raising `Crash` once `limit` writes are done."""

    def __init__(self, store: RocksStore) -> None:
        self.real = store.write
        self.done = 0
        self.limit: int | None = None
        store.write = self  # type: ignore[method-assign]

    def __call__(self, batch: object, sync: bool) -> None:
        if self.done == self.limit:
            raise Crash
        self.done += 1
        self.real(batch, sync)  # type: ignore[arg-type]


def _second_pass_parts(tmp_path: Path) -> int:
    store = _store(tmp_path / "count")
    views = ViewStore(store, slice_size=PUTS)
    views.fold_pass(1, 0, FIRST_END, 1_000)
    writes = CrashingWrites(store)
    views.fold_pass(1, 0, LOG_END, 1_000)
    store.close()
    return writes.done


def _latest_by_key(events: list[tuple[object, int]]) -> dict[object, int]:
    latest: dict[object, int] = {}
    for key, offset in events:
        latest[key] = offset
    return latest


def _snapshot_then_log(views: ViewStore) -> dict[object, int]:
    """What a bootstrap gives: the snapshot's entries, then the log from its offset."""
    spec = SnapshotSpec("t", 1, 0, (), None, None, True, 1_000, 1 << 20)
    cursor = SnapshotCursor(views, spec, Position(), None)
    chunk = cursor.next_chunk()
    assert chunk.done
    events = [(e.key, e.offset) for r in chunk.records for e in record_events(r)]
    assert all(offset < cursor.snapshot_offset for _, offset in events)
    for record in _records():
        events += [(e.key, e.offset) for e in record_events(record)
                   if e.offset >= cursor.snapshot_offset]
    cursor.close()
    return _latest_by_key(events)


def test_the_parts_without_a_crash_equal_one_write(tmp_path: Path,
                                                   reference: list[tuple[bytes, bytes]]) -> None:
    store = _store(tmp_path / "db")
    views = ViewStore(store, slice_size=PUTS)
    views.fold_pass(1, 0, FIRST_END, 1_000)
    state = views.fold_pass(1, 0, LOG_END, 1_000)
    assert state.pass_end == 0 and state.offset_next == LOG_END
    assert _dump(views) == reference
    store.close()


def test_a_pass_cut_after_any_part_is_finished_by_the_next(
        tmp_path: Path, reference: list[tuple[bytes, bytes]]) -> None:
    parts = _second_pass_parts(tmp_path)
    assert parts >= 5
    for parts_written in range(1, parts):
        _cut_and_finish(tmp_path / f"cut{parts_written}", reference, parts_written)


def _cut_and_finish(path: Path, reference: list[tuple[bytes, bytes]], parts_written: int) -> None:
    store = _store(path)
    views = ViewStore(store, slice_size=PUTS)
    first = views.fold_pass(1, 0, FIRST_END, 1_000)
    writes = CrashingWrites(store)
    writes.limit = parts_written
    with pytest.raises(Crash):
        views.fold_pass(1, 0, LOG_END, 1_000)
    cut = views.state(1, 0)
    assert (cut.offset_next, cut.scn, cut.pass_end) == (first.offset_next, first.scn, LOG_END)
    assert _snapshot_then_log(views) == _latest_by_key(
        [(codec.split_entry_suffix(k[9:])[1], codec.entry_offset(v))
         for k, v in reference if k[8:9] == codec.ENTRY_TAG])
    del store.write  # the process restarts
    after = ViewStore(store, slice_size=PUTS)  # as a restarted broker
    assert after.sweep(1, 0, 10**12, 100) == cut  # rule 4: the sweep waits
    assert after.fold_pass(1, 0, LOG_END, 1_000).offset_next == LOG_END
    assert _dump(after) == reference
    store.close()


def test_a_cut_pass_whose_records_are_gone_starts_the_view_over(
        tmp_path: Path, reference: list[tuple[bytes, bytes]]) -> None:
    store = _store(tmp_path / "db")
    views = ViewStore(store, slice_size=PUTS)
    views.fold_pass(1, 0, FIRST_END, 1_000)
    bogus = codec.ViewState(FIRST_END, 129, keys=1, tombstones=0, entry_bytes=5,
                            pass_end=LOG_END + 50)
    store.put_many([("view", codec.state_key(1, 0), bogus.encode())], durable=False)
    state = views.fold_pass(1, 0, LOG_END, 1_000)
    assert state.offset_next == LOG_END and state.pass_end == 0

    def without_index(view: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """One pass leaves no index entry of a tombstone upserted again later."""
        return [(k, v) for k, v in view if k[8:9] != codec.TOMBSTONE_TAG]
    assert without_index(_dump(views)) == without_index(reference)
    store.close()


def test_state_encoding_keeps_the_old_length_without_a_cut_pass() -> None:
    plain = codec.ViewState(5, 6, 7, 8, 9)
    cut = codec.ViewState(5, 6, 7, 8, 9, pass_end=20)
    assert len(plain.encode()) == codec.STATE.size
    assert codec.ViewState.decode(plain.encode()) == plain
    assert codec.ViewState.decode(cut.encode()) == cut
    with pytest.raises(codec.ViewCorrupt, match="expected 40 or 48"):
        codec.ViewState.decode(b"\x00" * 41)
