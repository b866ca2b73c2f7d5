"""The compacted view's cores: key layout, folding, accounting, the tombstone
sweep's choice, compaction's survivors, sparse records, and snapshot chunks.

Goal: the rules in broker/view/codec.py, fold.py, compaction.py, snapshot.py
and broker/log/sparse.py hold, edges included.
Method: direct calls on small inputs; hypothesis for key order and for the
fold against a dict model; the snapshot cursor over a real RocksDB store
(a temp dir) read in one go and in chunks resumed from each position.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log import codec as log_codec
from broker.log.rocks_store import Append, RocksStore
from broker.log.sparse import densify
from broker.read_path import select_events
from broker.view import codec
from broker.view.compaction import survivors
from broker.view.fold import account, entry_keys, expired_tombstones, fold_records
from broker.view.sizes import sizes_of
from broker.view.snapshot import Position, SnapshotCursor, SnapshotSpec, decode_keys
from broker.view.store import ViewStore
from sdk.core.columns import record_events, record_offsets
from sdk.core.filters import KeyFilterSpec, evaluate
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb

INT64 = st.integers(-(2**63), 2**63 - 1)


@given(st.lists(INT64, min_size=2, max_size=50), st.lists(st.text(max_size=8), max_size=10))
def test_entry_keys_sort_ints_numerically_then_strings(ints: list[int], strings: list[str]) -> None:
    encoded = [(codec.key_part(k), k) for k in ints] + [(codec.key_part(s), s) for s in strings]
    ordered = [k for _, k in sorted(encoded, key=lambda pair: pair[0])]
    assert ordered == sorted(ints) + sorted(strings, key=lambda s: s.encode())


@given(st.text(max_size=20), st.one_of(INT64, st.text(min_size=1, max_size=20)))
def test_entry_suffix_round_trip(source: str, key: int | str) -> None:
    assert codec.split_entry_suffix(codec.source_part(source) + codec.key_part(key)) == (source, key)


@given(st.lists(INT64, min_size=1, max_size=30), st.lists(st.text(max_size=5), max_size=3))
def test_keys_decode_back_in_one_pass(ints: list[int], strings: list[str]) -> None:
    head = b"P" + codec.source_part("src")
    for keys in (ints, ints + strings):
        encoded = [head + codec.key_part(k) for k in keys]
        assert decode_keys(encoded, len(head)) == keys


def test_a_source_is_one_contiguous_range() -> None:
    """A source that is a prefix of another never interleaves with it."""
    keys = sorted(codec.source_part(s) + codec.key_part(k) for s in ("a", "ab", "b") for k in (1, 2))
    sources = [codec.source_of_suffix(k) for k in keys]
    assert sources == sorted(sources, key=lambda s: (len(s), s))
    assert codec.source_part("a") + codec.AFTER_KEYS_TAG > max(
        codec.source_part("a") + codec.key_part(k) for k in (2**63 - 1, "zzz"))


def _record(base: int, keys: list[int | str], values: list[bytes], sources: list[str] | None = None,
            opcodes: list[int] | None = None, window: bool = False, publish: int = 1_000) -> pb.Record:
    batch = pb.EventBatch(count=len(keys), values=values, sources=sources or [])
    if all(isinstance(k, int) for k in keys):
        batch.key_ints.extend(keys)  # type: ignore[arg-type]
    else:
        batch.key_strings.extend([str(k) for k in keys])
    if opcodes:
        batch.opcodes.extend(opcodes)  # type: ignore[arg-type]
    return pb.Record(topic="t", partition=0, base_offset=base, scn_first=base + 100,
                     window=window, publish_time_ms=publish, batch=batch)


EVENT = st.tuples(st.sampled_from(["a", "b"]), st.integers(-5, 5), st.booleans())


@given(st.lists(st.lists(EVENT, min_size=1, max_size=6), min_size=1, max_size=6))
def test_fold_keeps_the_latest_event_per_source_and_key(batches: list[list[tuple[str, int, bool]]]) -> None:
    records, model, base = [], {}, 0
    for events in batches:
        values = [f"{base + i}".encode() for i in range(len(events))]
        opcodes = [pb.DELETE if delete else pb.UPSERT for _, _, delete in events]
        records.append(_record(base, [k for _, k, _ in events], values, [s for s, _, _ in events],
                               opcodes))
        for i, (source, key, delete) in enumerate(events):
            model[(source, key)] = (base + i, delete)
        base += len(events)
    fold = fold_records(7, 0, records, 0, 0)
    prefix = codec.entries_prefix(7, 0)
    got = {codec.split_entry_suffix(k[len(prefix):]): codec.decode_entry(v) for k, v in fold.entries.items()}
    assert {k: (e.offset, e.is_tombstone) for k, e in got.items()} == model
    assert fold.offset_next == base and fold.scn == base + 99 and fold.events == base
    assert len(fold.tombstones) == sum(delete for _, delete in model.values())
    state = account(codec.ViewState(), list(fold.entries), sizes_of(list(fold.entries.values())),
                    [None] * len(fold.entries), fold.offset_next, fold.scn)
    assert (state.keys, state.tombstones) == (len(model), len(fold.tombstones))


@given(st.lists(st.lists(EVENT, min_size=1, max_size=6), min_size=1, max_size=8),
       st.integers(1, 8))
def test_a_fold_that_pauses_folds_the_same(batches: list[list[tuple[str, int, bool]]],
                                           every: int) -> None:
    """A pass lets other threads run during its fold (store.py): the same result,
    with a pause each time `every` winners were encoded."""
    records, base = [], 0
    for events in batches:
        opcodes = [pb.DELETE if delete else pb.UPSERT for _, _, delete in events]
        records.append(_record(base, [k for _, k, _ in events], [b"%d" % base] * len(events),
                               [s for s, _, _ in events], opcodes))
        base += len(events)
    pauses: list[int] = []
    paused = fold_records(7, 0, records, 5, 9, lambda: pauses.append(1), every)
    whole = fold_records(7, 0, records, 5, 9)
    assert paused == whole
    expected, encoded, start = 0, 0, 0
    for events in batches:  # a pause between records, once `every` winners were encoded
        encoded += sum(start <= codec.entry_offset(v) < start + len(events)
                       for v in whole.entries.values())
        start += len(events)
        if encoded >= every:
            expected, encoded = expected + 1, 0
    assert len(pauses) == expected


@given(st.lists(st.tuples(st.sampled_from(["a", "b", ""]), st.lists(st.integers(-3, 3), min_size=1,
                                                                      max_size=8)),
                min_size=1, max_size=6), st.booleans())
def test_fold_of_int_keyed_one_source_batches(batches: list[tuple[str, list[int]]],
                                              one_source: bool) -> None:
    """The numpy path (int keys, one source per record) keeps the same winners."""
    records, model, base = [], {}, 0
    for source, keys in batches:
        source = "a" if one_source else source
        records.append(_record(base, keys, [b"%d" % (base + i) for i in range(len(keys))],
                               [source]))
        for i, key in enumerate(keys):
            model[(source, key)] = base + i
        base += len(keys)
    fold = fold_records(3, 1, records, 0, 0)
    prefix = codec.entries_prefix(3, 1)
    got = {codec.split_entry_suffix(k[len(prefix):]): codec.decode_entry(v)
           for k, v in fold.entries.items()}
    assert {k: e.offset for k, e in got.items()} == model
    assert all(e.value == b"%d" % e.offset for e in got.values())


def test_account_counts_replacements_and_tombstone_changes() -> None:
    live = codec.encode_entry(1, 1, 0, 0, 0, pb.UPSERT, b"", b"", b"", b"v")
    dead = codec.encode_entry(2, 2, 0, 0, 0, pb.DELETE, b"", b"", b"", b"")
    start = codec.ViewState(5, 5, keys=2, tombstones=1, entry_bytes=100)
    live_size, dead_size = sizes_of([live, dead])
    assert (live_size, dead_size) == (len(live), len(dead) + (1 << 48))
    state = account(start, [b"k1", b"k2", b"k3"], [dead_size, live_size, live_size],
                    [live_size, dead_size, None], 9, 9)
    assert (state.offset_next, state.keys, state.tombstones) == (9, 3, 1)
    assert state.entry_bytes == 100 + (len(dead) - len(live)) + (len(live) - len(dead)) + 2 + len(live)


def test_sweep_drops_only_tombstones_still_indexed() -> None:
    prefix = b"P"
    dead = codec.encode_entry(5, 5, 0, 0, 0, pb.DELETE, b"", b"", b"", b"")
    again = codec.encode_entry(9, 9, 0, 0, 0, pb.UPSERT, b"", b"", b"", b"x")
    later_dead = codec.encode_entry(12, 12, 0, 0, 0, pb.DELETE, b"", b"", b"", b"")
    index = [(codec.tombstone_key(1, 0, 10, 5), b"s1"), (codec.tombstone_key(1, 0, 10, 6), b"s2"),
             (codec.tombstone_key(1, 0, 10, 7), b"s3"), (codec.tombstone_key(1, 0, 10, 8), b"s4")]
    doomed = expired_tombstones(index, [dead, again, later_dead, None], prefix)
    assert doomed == [b"Ps1"]  # upserted again, deleted again later, or already gone: kept


def test_compaction_keeps_latest_events_and_fresh_tombstones() -> None:
    def entry(offset: int, opcode: int) -> bytes:
        return codec.encode_entry(offset, offset, 0, 0, 0, opcode, b"", b"", b"", b"")
    offsets = [10, 11, 12, 13]
    opcodes = [pb.UPSERT, pb.UPSERT, pb.DELETE, pb.DELETE]
    entries = [entry(10, pb.UPSERT), entry(20, pb.UPSERT), entry(12, pb.DELETE), None]
    assert survivors(offsets, opcodes, 1_000, entries, now_ms=1_500, delete_retention_ms=1_000,
                     settled_below=14) == [0, 2]
    assert survivors(offsets, opcodes, 1_000, entries, now_ms=2_000, delete_retention_ms=1_000,
                     settled_below=14) == [0]


def test_sparse_record_reads_back_dense_with_its_real_positions() -> None:
    record = _record(40, [1, 2, 3, 4], [b"a", b"b", b"c", b"d"], ["s"], [pb.UPSERT, pb.DELETE,
                                                                          pb.UPSERT, pb.UPSERT])
    record.batch.slots.extend(slots_of([1, 2, 3, 4]))
    sparse = select_events(record, [1, 3])
    assert record_offsets(sparse) == [41, 43]
    again = select_events(sparse, [1])  # subsetting a sparse record keeps original offsets
    assert record_offsets(again) == [43]
    dense, present = densify(sparse, 4)
    assert present == [1, 3] and dense.batch.count == 4
    events = record_events(dense)
    assert [(e.offset, e.key, e.value, e.opcode) for e in (events[1], events[3])] == [
        (41, 2, b"b", pb.DELETE), (43, 4, b"d", pb.UPSERT)]


def test_entry_keys_of_mixed_and_multi_source_batches() -> None:
    batch = pb.EventBatch(count=3, key_strings=["x", "", "7"], key_ints=[0, 5, 0],
                          sources=["a", "b", "a"], values=[b""] * 3)
    keys = entry_keys(b"", batch)
    assert [codec.split_entry_suffix(k) for k in keys] == [("a", "x"), ("b", 5), ("a", "7")]


# ---------------------------------------------------------------- snapshot over RocksDB


@pytest.fixture
def view_store(tmp_path: Path) -> ViewStore:
    store = RocksStore(str(tmp_path / "db"), fsync=False)
    records = [
        _record(0, list(range(0, 40)), [b"a%d" % i for i in range(40)], ["orders"]),
        _record(40, list(range(20, 60)), [b"b%d" % i for i in range(40)], ["accounts"]),
        _record(80, list(range(10, 30)), [b""] * 20, ["orders"], [pb.DELETE]),
        _record(100, ["k1", "k2"], [b"s1", b"s2"], ["orders"]),
    ]
    appends = []
    for r in records:
        body = r.SerializeToString()
        appends.append(Append(r.base_offset, r.scn_first, r.batch.count, False,
                              log_codec.encode_record(body, 1, r.batch.count, r.scn_first, False)))
    store.append(1, 0, appends, {}, 0, 0)
    views = ViewStore(store)
    views.fold_pass(1, 0, 102, 1_000)
    yield views
    store.close()


def _spec(events_max: int, tombstones: bool = True, mod: str | None = None,
          sources: tuple[str, ...] = ()) -> SnapshotSpec:
    selector = None
    if mod is not None:
        spec = KeyFilterSpec.parse_cli(mod)

        def selector(batch: pb.EventBatch) -> list[int]:
            return evaluate(spec, list(batch.key_ints) or list(batch.key_strings)).passed
    return SnapshotSpec("t", 1, 0, sources, None, selector, tombstones, events_max, 1 << 20)


def _read(views: ViewStore, spec: SnapshotSpec, resume_each_chunk: bool) -> list[tuple[str, object, int]]:
    got, position, offset = [], Position(), None
    cursor = SnapshotCursor(views, spec, position, offset)
    offset = cursor.snapshot_offset
    for _ in range(1_000):
        chunk = cursor.next_chunk()
        for record in chunk.records:
            got += [(e.source, e.key, e.offset) for e in record_events(record)]
        if chunk.done:
            return got
        if resume_each_chunk:
            cursor.close()
            cursor = SnapshotCursor(views, spec, chunk.position, offset)
    raise AssertionError("snapshot never ended")


@pytest.mark.parametrize("events_max", [1, 3, 7, 1_000])
def test_snapshot_in_chunks_resumed_equals_one_read(view_store: ViewStore, events_max: int) -> None:
    whole = _read(view_store, _spec(1_000), False)
    assert _read(view_store, _spec(events_max), True) == whole
    assert [s for s, _, _ in whole] == ["accounts"] * 40 + ["orders"] * 42  # sources by name
    orders = [(k, o) for s, k, o in whole if s == "orders"]
    assert orders[:3] == [(0, 0), (1, 1), (2, 2)] and orders[-2:] == [("k1", 100), ("k2", 101)]
    assert (15, 85) in orders  # the tombstone, at its own offset


def test_snapshot_filters_tombstones_and_sources(view_store: ViewStore) -> None:
    live = _read(view_store, _spec(5, tombstones=False, sources=("orders",)), True)
    assert [k for _, k, _ in live] == [*range(0, 10), *range(30, 40), "k1", "k2"]
    modded = _read(view_store, _spec(4, mod="mod:10:[3]", sources=("accounts", "orders")), True)
    assert [(s, k) for s, k, _ in modded] == [("accounts", k) for k in (23, 33, 43, 53)] + [
        ("orders", k) for k in (3, 13, 23, 33)]


def test_snapshot_at_an_earlier_offset_leaves_later_changes_to_the_catch_up(
        view_store: ViewStore) -> None:
    """A snapshot asked for at offset 80 sends no entry changed at or after 80."""
    cursor = SnapshotCursor(view_store, _spec(1_000), Position(), 80)
    events = [e for r in cursor.next_chunk().records for e in record_events(r)]
    assert all(e.offset < 80 for e in events)
    assert {e.key for e in events if e.source == "orders"} == set(range(0, 10)) | set(range(30, 40))


def test_a_pass_stops_at_its_bytes_bound_and_the_next_goes_on(tmp_path: Path) -> None:
    """view_pass_bytes_max: a pass holds its records, their winners and its writes at
    once, so large events bound it by bytes before events_max (600 MB of 1 kB events
    with unique keys took a broker to about 780 MB of RSS, 250 with the view off)."""
    store = RocksStore(str(tmp_path / "db"), fsync=False)
    try:
        appends = []
        for base in range(0, 50, 10):  # 5 records of 10 events of 10 kB: about 100 kB each
            r = _record(base, list(range(base, base + 10)), [b"x" * 10_000] * 10)
            body = r.SerializeToString()
            appends.append(Append(base, r.scn_first, 10, False,
                                  log_codec.encode_record(body, 1, 10, r.scn_first, False)))
        store.append(1, 0, appends, {}, 0, 0)
        views = ViewStore(store)
        assert views.fold_pass(1, 0, 50, 1_000, bytes_max=250_000).offset_next == 30
        assert views.fold_pass(1, 0, 50, 1_000, bytes_max=1).offset_next == 40  # one at least
        done = views.fold_pass(1, 0, 50, 1_000)  # 16 MiB by default
        assert (done.offset_next, done.keys) == (50, 50)
    finally:
        store.close()
