"""The view's remembered entry sizes (broker/view/sizes.py).

Goal: rules 1-4 of sizes.py hold. Whatever runs between passes (sweeps that
delete, clears, a pass cut by a failed write, a restart), and
whatever the capacity, the counts a pass writes are those of the entries the
view holds; a pass over keys it knows reads nothing back.
Method: a real RocksDB store (temp dir); the counts are checked against a
recount of the stored entries after every step.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.config import ConfigError, load_settings
from broker.log.rocks_store import Append, RocksStore
from broker.view import codec
from broker.view.service import ViewService
from broker.view.sizes import EntrySizes, sizes_of
from broker.view.store import ViewStore
from sdk.core.pb import keybus_pb2 as pb
from tests.support.view_log import CountedWrites

EVENTS_PER_RECORD = 6


class Cut(Exception):
    """A write that fails mid-pass."""


def _cut() -> None:
    raise Cut


def _records(keys: list[int], deletes: list[bool]) -> list[Append]:
    out = []
    for base in range(0, len(keys), EVENTS_PER_RECORD):
        part = keys[base:base + EVENTS_PER_RECORD]
        opcodes = [pb.DELETE if d else pb.UPSERT for d in deletes[base:base + len(part)]]
        batch = pb.EventBatch(count=len(part), key_ints=part, sources=["s"], opcodes=opcodes,
                              values=[b"v" * (1 + (base + i) % 7) for i in range(len(part))])
        out.append(Append.of_record(pb.Record(topic="t", partition=0, base_offset=base,
                                              scn_first=base + 1, publish_time_ms=base,
                                              batch=batch)))
    return out


def _recount(views: ViewStore) -> tuple[int, int, int]:
    """(keys, tombstones, bytes) of the entries stored for topic id 1, partition 0."""
    prefix = codec.entries_prefix(1, 0)
    it = views.iterator()
    it.seek(prefix)
    keys = tombstones = size = 0
    while it.valid() and bytes(it.key()).startswith(prefix):
        value = bytes(it.value())
        keys += 1
        tombstones += codec.entry_is_tombstone(value)
        size += len(bytes(it.key())) + len(value)
        it.next()
    return keys, tombstones, size


STEP = st.one_of(
    st.tuples(st.just("pass"), st.integers(1, 40)),
    st.tuples(st.just("sweep"), st.integers(0, 200)),
    st.tuples(st.just("clear"), st.just(0)),
    st.tuples(st.just("cut"), st.integers(0, 3)),
    st.tuples(st.just("restart"), st.just(0)),
)


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.integers(0, 12), min_size=1, max_size=120), data=st.data(),
       steps=st.lists(STEP, min_size=1, max_size=14), capacity=st.sampled_from([0, 4, 10_000]))
def test_counts_match_the_stored_entries_after_every_step(
        keys: list[int], data: st.DataObject, steps: list[tuple[str, int]], capacity: int) -> None:
    deletes = data.draw(st.lists(st.booleans(), min_size=len(keys), max_size=len(keys)))
    with tempfile.TemporaryDirectory(prefix="keybus-view-sizes-") as tmp:
        store = RocksStore(str(Path(tmp) / "db"), fsync=False)
        store.append(1, 0, _records(keys, deletes), {}, 0, 0)
        views = ViewStore(store, slice_size=3, sizes_capacity=capacity)
        try:
            for step, n in [*steps, ("pass", len(keys))]:
                if step == "pass":
                    views.fold_pass(1, 0, len(keys), n)
                elif step == "sweep":
                    views.sweep(1, 0, n, 1_000)
                elif step == "clear":
                    views.clear(1, 0)
                elif step == "cut":
                    writes = CountedWrites(store, _cut)
                    writes.limit = n
                    with contextlib.suppress(Cut):  # no Cut: the pass wrote less
                        views.fold_pass(1, 0, len(keys), len(keys))
                    store.write = writes.real  # type: ignore[method-assign]
                else:  # a restarted broker's store: it knows no sizes
                    views = ViewStore(store, slice_size=3, sizes_capacity=capacity)
                state = views.state(1, 0)
                if not state.pass_end:  # a cut pass's counts are those it will end with
                    assert (state.keys, state.tombstones, state.entry_bytes) == _recount(views)
        finally:
            store.close()


def _counted(get: Callable[[list[bytes]], list[bytes | None]], read: list[int]
             ) -> Callable[[list[bytes]], list[bytes | None]]:
    def counted(keys: list[bytes]) -> list[bytes | None]:
        read.append(len(keys))
        return get(keys)
    return counted


def test_a_pass_over_known_keys_reads_nothing(tmp_path: Path) -> None:
    store = RocksStore(str(tmp_path / "db"), fsync=False)
    keys = [i % 10 for i in range(60)]
    store.append(1, 0, _records(keys, [i % 4 == 0 for i in range(60)]), {}, 0, 0)
    views = ViewStore(store)
    read: list[int] = []
    views.get_entries = _counted(views.get_entries, read)  # type: ignore[assignment]
    try:
        views.fold_pass(1, 0, 30, 30)  # an empty view: every key is new, nothing read
        views.fold_pass(1, 0, 60, 30)  # the same 10 keys again: known
        assert read == []
        assert (views.state(1, 0).keys, views.state(1, 0).tombstones,
                views.state(1, 0).entry_bytes) == _recount(views)
        other = ViewStore(store)  # another store object: knows nothing, reads
        other.get_entries = _counted(other.get_entries, read)  # type: ignore[assignment]
        other.clear(1, 0)
        other.fold_pass(1, 0, 30, 30)
        assert read == []  # cleared: empty, every key new
    finally:
        store.close()


def test_a_state_written_elsewhere_drops_what_was_known() -> None:
    sizes = EntrySizes()
    after = codec.ViewState(20, 20, keys=2, entry_bytes=30)
    sizes.remember(1, 0, after, [b"a", b"b"], [24, 5])
    asked: list[list[bytes]] = []

    def read(keys: list[bytes]) -> list[bytes | None]:
        asked.append(keys)
        return [None] * len(keys)
    assert sizes.lookup(1, 0, after, [b"a", b"c"], read) == [24, None]
    assert asked == []  # knows both keys the state counts: c is absent
    elsewhere = codec.ViewState(20, 20, keys=1, entry_bytes=15)  # a sweep deleted one
    assert sizes.lookup(1, 0, elsewhere, [b"a"], read) == [None]
    assert asked == [[b"a"]]


def test_capacity_bounds_what_is_kept() -> None:
    sizes = EntrySizes(capacity=3)
    two = codec.ViewState(1, 1, keys=2)
    sizes.remember(1, 0, two, [b"a", b"b"], [2, 2])
    sizes.remember(1, 1, two, [b"c", b"d"], [2, 2])  # past 3 in all: not kept
    asked: list[list[bytes]] = []
    stored = codec.encode_entry(1, 1, 0, 0, 0, pb.DELETE, b"", b"", b"", b"x")

    def read(keys: list[bytes]) -> list[bytes | None]:
        asked.append(keys)
        return [stored] * len(keys)
    assert sizes.lookup(1, 0, two, [b"a"], read) == [2] and asked == []
    assert sizes.lookup(1, 1, two, [b"c"], read) == [len(stored) + (1 << 48)] == sizes_of([stored])
    assert asked == [[b"c"]]


def test_the_setting_reaches_the_store_and_refuses_negatives(tmp_path: Path) -> None:
    settings = load_settings(None, env={"KEYBUS_VIEW_SIZES_REMEMBERED_MAX": "7"})
    store = RocksStore(str(tmp_path / "db"), fsync=False)
    try:
        assert ViewService(store, settings).views.sizes.capacity == 7
    finally:
        store.close()
    assert load_settings(None, env={}).view_sizes_remembered_max == 200_000
    with pytest.raises(ConfigError, match="view_sizes_remembered_max=-1 is negative"):
        load_settings(None, env={"KEYBUS_VIEW_SIZES_REMEMBERED_MAX": "-1"})
