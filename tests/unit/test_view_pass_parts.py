"""A view pass written in parts: as safe as one WriteBatch (broker/view/store.py).

Goal: rules 1-4 of store.py hold. A crash after any part leaves a view that
the next pass finishes to exactly the view written in one go (entries,
tombstone index and counts); a snapshot read between parts, plus the log
from its offset, gives every key's latest event; a pass whose log records are
gone makes the view start over; the sweep waits for a cut pass.
Method: a real RocksDB store (temp dir) with a small slice. The cut is the
store's `write` raising after k writes, for every k, then the store closed
and opened again (RocksDB replays its WAL); and once a real process that
dies with os._exit after k writes (as kill -9 leaves it, no flush), whose
store this process then opens.
"""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log.rocks_store import RocksStore
from broker.view import codec
from broker.view.snapshot import Position, SnapshotCursor, SnapshotSpec
from broker.view.store import ViewStore
from sdk.core.columns import record_events
from tests.support.broker_process import REPO
from tests.support.view_log import (
    FIRST_END,
    KILLED,
    LOG_END,
    PUTS,
    CountedWrites,
    new_store,
    records,
)


class Crash(Exception):
    """The store's write failing as a process would die: nothing after it."""


def _raise_crash() -> None:
    raise Crash


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
    store = new_store(tmp_path / "reference")
    views = ViewStore(store, slice_size=1_000)
    views.fold_pass(1, 0, FIRST_END, 1_000)
    views.fold_pass(1, 0, LOG_END, 1_000)
    yield _dump(views)
    store.close()


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
    for record in records():
        events += [(e.key, e.offset) for e in record_events(record)
                   if e.offset >= cursor.snapshot_offset]
    cursor.close()
    return _latest_by_key(events)


def _check_cut_then_finish(path: Path, reference: list[tuple[bytes, bytes]]) -> None:
    """Open the store a cut pass left at `path`, as a restarted broker does."""
    store = RocksStore(str(path), fsync=False)
    views = ViewStore(store, PUTS)
    cut = views.state(1, 0)
    assert (cut.offset_next, cut.pass_end) == (FIRST_END, LOG_END)
    assert cut.scn == max(r.scn_first + r.batch.count - 1 for r in records()[:1])
    assert _snapshot_then_log(views) == _latest_by_key(
        [(codec.split_entry_suffix(k[9:])[1], codec.entry_offset(v))
         for k, v in reference if k[8:9] == codec.ENTRY_TAG])
    assert views.sweep(1, 0, 10**12, 100) == cut  # rule 4: the sweep waits
    assert views.fold_pass(1, 0, LOG_END, 1_000).offset_next == LOG_END
    assert _dump(views) == reference
    store.close()


def _second_pass_writes(tmp_path: Path) -> int:
    store = new_store(tmp_path / "count")
    views = ViewStore(store, PUTS)
    views.fold_pass(1, 0, FIRST_END, 1_000)
    writes = CountedWrites(store, _raise_crash)
    views.fold_pass(1, 0, LOG_END, 1_000)
    store.close()
    return writes.done


def test_the_parts_without_a_crash_equal_one_write(tmp_path: Path,
                                                   reference: list[tuple[bytes, bytes]]) -> None:
    store = new_store(tmp_path / "db")
    views = ViewStore(store, PUTS)
    views.fold_pass(1, 0, FIRST_END, 1_000)
    state = views.fold_pass(1, 0, LOG_END, 1_000)
    assert state.pass_end == 0 and state.offset_next == LOG_END
    assert _dump(views) == reference
    store.close()


def test_a_pass_cut_after_any_part_is_finished_by_the_next(
        tmp_path: Path, reference: list[tuple[bytes, bytes]]) -> None:
    parts = _second_pass_writes(tmp_path)
    assert parts >= 5
    for parts_written in range(1, parts):
        path = tmp_path / f"cut{parts_written}"
        store = new_store(path)
        views = ViewStore(store, PUTS)
        views.fold_pass(1, 0, FIRST_END, 1_000)
        CountedWrites(store, _raise_crash).limit = parts_written
        _cut_pass(views)
        store.close()
        del store, views  # the process ends: every handle on the database goes,
        gc.collect()  # and with the last one RocksDB's lock on the directory
        _check_cut_then_finish(path, reference)


def _cut_pass(views: ViewStore) -> None:
    """The second pass, cut by Crash (caught here: its traceback holds the store)."""
    try:
        views.fold_pass(1, 0, LOG_END, 1_000)
    except Crash:
        return
    raise AssertionError("the pass ended before its cut")


def test_a_process_killed_mid_pass_leaves_a_view_the_next_pass_finishes(
        tmp_path: Path, reference: list[tuple[bytes, bytes]]) -> None:
    path = tmp_path / "killed"
    child = subprocess.run([sys.executable, "-m", "tests.support.view_log", str(path), "3"],
                           cwd=REPO, timeout=60, capture_output=True, text=True, check=False)
    assert child.returncode == KILLED, child.stderr
    _check_cut_then_finish(path, reference)


def test_a_cut_pass_whose_records_are_gone_starts_the_view_over(
        tmp_path: Path, reference: list[tuple[bytes, bytes]]) -> None:
    store = new_store(tmp_path / "db")
    views = ViewStore(store, PUTS)
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
    waiting = codec.ViewState(load_from=240)
    assert codec.ViewState.decode(waiting.encode()) == waiting
    with pytest.raises(codec.ViewCorrupt, match="expected 40, 48 or 56"):
        codec.ViewState.decode(b"\x00" * 41)
