"""Loading a follower's view from its upstream's snapshot (broker/view/load.py).

Goal: rules 1-4 of load.py hold. A view loaded from another view's snapshot
(tombstones included) holds the same entries and counts, at the snapshot's
offset and SCN; the stored state stays marked until the log reaches that
offset, and a marked view folds nothing and is refused to Bootstrap; a load
cut by a crash after any write leaves a marked view (never a half one served
as complete) that the next load makes whole; a snapshot below the log's
start is refused.
Method: two real RocksDB stores (temp dirs): the "upstream" folds the test
log (tests/support/view_log.py); its snapshot, read in small chunks, is the
source's Bootstrap answer. The partition is a small fake (the load reads its
start and end and waits for data on it).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.view import codec
from broker.view.bootstrap import check_complete, check_loaded
from broker.view.load import LoadError, ViewSource, load_view
from broker.view.snapshot import Position, SnapshotCursor, SnapshotSpec
from broker.view.store import ViewStore
from sdk.core.pb import keybus_pb2 as pb
from tests.support.view_log import FIRST_END, LOG_END, PUTS, CountedWrites, new_store


class Crash(Exception):
    """A write failing as a process would die: nothing after it."""


def _raise_crash() -> None:
    raise Crash


class FakePartition:
    """What a load reads of a partition; `wait_for_data` notes the stored state then."""

    def __init__(self, views: ViewStore, start: int, end: int) -> None:
        self.meta = SimpleNamespace(topic_id=1, name="t")
        self.index = 0
        self.start_offset = start
        self.removing_below = 0
        self.end_offset = end
        self.views = views
        self.waited: list[codec.ViewState] = []

    async def wait_for_data(self, offset: int) -> None:
        self.waited.append(self.views.state(1, 0))
        self.end_offset = max(self.end_offset, offset + 1)  # the copy reached it


def _entries(views: ViewStore) -> tuple[list[tuple[bytes, bytes]], codec.ViewState]:
    """Entries (no tombstone index: one pass keeps stale index keys) and the state."""
    it = views.iterator()
    it.seek(codec.entries_prefix(1, 0))
    found = []
    while it.valid() and bytes(it.key()).startswith(codec.entries_prefix(1, 0)):
        found.append((bytes(it.key()), bytes(it.value())))
        it.next()
    del it
    return found, views.state(1, 0)


def _source(upstream: ViewStore, fail_after: int | None = None, gap: int = 0) -> ViewSource:
    """The upstream's snapshot as Bootstrap answers it, 7 events a message."""
    async def snapshot() -> AsyncGenerator[pb.BootstrapResponse, None]:
        spec = SnapshotSpec("t", 1, 0, (), None, None, True, 7, 1 << 20)
        cursor = SnapshotCursor(upstream, spec, Position(), None)
        marker: pb.BootstrapMarker | None = pb.BootstrapMarker(
            phase=pb.SNAPSHOT, snapshot_offset=cursor.snapshot_offset,
            snapshot_scn=cursor.state.scn, keys_missing_below=gap)
        sent = 0
        while True:
            chunk = cursor.next_chunk()
            response = pb.BootstrapResponse(records=chunk.records, phase=pb.SNAPSHOT)
            if marker is not None:
                response.marker.CopyFrom(marker)
                marker = None
            if fail_after is not None and sent == fail_after:
                raise LoadError("the upstream went away")
            yield response
            sent += 1
            if chunk.done:
                break
        cursor.close()
        yield pb.BootstrapResponse(phase=pb.CATCHUP, marker=pb.BootstrapMarker(
            phase=pb.CATCHUP, snapshot_offset=cursor.snapshot_offset))
    return ViewSource("upstream u", snapshot)


async def _now(work: Callable[[], codec.ViewState]) -> codec.ViewState:
    return work()


def _load(views: ViewStore, partition: FakePartition, source: ViewSource) -> codec.ViewState:
    return asyncio.run(load_view(views, _now, partition, source, 90))  # type: ignore[arg-type]


@pytest.fixture
def upstream(tmp_path: Path) -> Any:
    store = new_store(tmp_path / "upstream")
    views = ViewStore(store, slice_size=1_000)
    views.fold_pass(1, 0, FIRST_END, 1_000)
    views.fold_pass(1, 0, LOG_END, 1_000)
    yield views
    store.close()


def test_a_loaded_view_holds_the_upstreams_and_is_marked_until_the_log_reaches_it(
        tmp_path: Path, upstream: ViewStore) -> None:
    store = RocksStore(str(tmp_path / "follower"), fsync=False)
    views = ViewStore(store, PUTS)
    marked = views.mark_for_load(1, 0, 90)  # rule 1, before the log restarts at 90
    assert marked == codec.ViewState(load_from=90)
    assert views.fold_pass(1, 0, LOG_END, 1_000) == marked  # folds nothing across the gap
    partition = FakePartition(views, 90, 100)  # the copy holds 90..99 so far
    state = _load(views, partition, _source(upstream))
    assert [s.load_from for s in partition.waited] == [90]  # marked while the log lacked V
    entries, stored = _entries(views)
    reference, upstream_state = _entries(upstream)
    assert entries == reference
    assert state == stored == upstream_state  # offset, SCN and counts: the upstream's
    assert stored.offset_next == LOG_END and not stored.load_from
    check_loaded(partition, SimpleNamespace(source=None), stored)  # type: ignore[arg-type]
    store.close()


def test_a_marked_view_is_refused_to_bootstrap() -> None:
    partition = SimpleNamespace(meta=SimpleNamespace(name="t"), index=0)
    view = SimpleNamespace(source=ViewSource("upstream 127.0.0.1:1", None),  # type: ignore[arg-type]
                           fold_why="", fold_failure="")
    with pytest.raises(BrokerError) as refused:
        check_loaded(partition, view, codec.ViewState(load_from=240))  # type: ignore[arg-type]
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE
    message = str(refused.value)
    assert "being loaded from upstream 127.0.0.1:1" in message and "offset 240" in message
    assert "bootstrap from the leader" in message


def test_a_marked_view_to_fold_from_the_log_is_refused_naming_why_and_its_failure() -> None:
    partition = SimpleNamespace(meta=SimpleNamespace(name="t"), index=0)
    view = SimpleNamespace(source=None, fold_why="this broker now leads the topic",
                           fold_failure="OSError: [Errno 5] disk")
    with pytest.raises(BrokerError) as refused:
        check_loaded(partition, view, codec.ViewState(load_from=240))  # type: ignore[arg-type]
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE
    message = str(refused.value)
    assert "folded again from this broker's log (this broker now leads the topic)" in message
    assert "failed (OSError: [Errno 5] disk) and is retried" in message


def test_a_load_cut_after_any_write_stays_marked_and_the_next_load_is_whole(
        tmp_path: Path, upstream: ViewStore) -> None:
    reference = _entries(upstream)
    counter = RocksStore(str(tmp_path / "count"), fsync=False)
    writes = CountedWrites(counter, _raise_crash)
    _load(ViewStore(counter, PUTS), FakePartition(ViewStore(counter, PUTS), 90, LOG_END),
          _source(upstream))
    total = writes.done
    counter.close()
    assert total >= 5
    for cut in range(1, total):
        path = tmp_path / f"cut{cut}"
        store = RocksStore(str(path), fsync=False)
        views = ViewStore(store, PUTS)
        CountedWrites(store, _raise_crash).limit = cut
        with pytest.raises(Crash):
            _load(views, FakePartition(views, 90, LOG_END), _source(upstream))
        store.close()
        del store, views
        gc.collect()
        store = RocksStore(str(path), fsync=False)  # as a restarted broker opens it
        views = ViewStore(store, PUTS)
        assert views.state(1, 0).load_from == 90, cut  # never served as complete
        assert views.fold_pass(1, 0, LOG_END, 1_000).load_from == 90
        _load(views, FakePartition(views, 90, LOG_END), _source(upstream))
        assert _entries(views) == reference, cut
        store.close()


def test_a_load_cut_by_the_upstream_is_retried_from_the_start(
        tmp_path: Path, upstream: ViewStore) -> None:
    store = RocksStore(str(tmp_path / "follower"), fsync=False)
    views = ViewStore(store, PUTS)
    with pytest.raises(LoadError, match="went away"):
        _load(views, FakePartition(views, 90, LOG_END), _source(upstream, fail_after=2))
    assert views.state(1, 0).load_from == 90
    _load(views, FakePartition(views, 90, LOG_END), _source(upstream))
    assert _entries(views) == _entries(upstream)
    store.close()


def test_a_snapshot_below_the_logs_start_is_refused(tmp_path: Path,
                                                     upstream: ViewStore) -> None:
    store = RocksStore(str(tmp_path / "follower"), fsync=False)
    views = ViewStore(store, PUTS)
    with pytest.raises(LoadError, match="starts at 130"):
        _load(views, FakePartition(views, 130, 130), _source(upstream))  # rule 3
    assert views.state(1, 0).load_from == 90
    store.close()


def test_a_view_folded_past_its_gap_keeps_it_and_a_load_brings_the_upstreams(
        tmp_path: Path, upstream: ViewStore) -> None:
    """The gap of a view folded from a log with offsets it never saw (`fold_from_log`)
    survives a rebuild and a restart, a load clears it or brings the upstream's
    (rule 5), and a Bootstrap of a view with a gap is refused unless it accepts it."""
    path = str(tmp_path / "follower")
    store = RocksStore(path, fsync=False)
    views = ViewStore(store, PUTS)
    views.mark_for_load(1, 0, 90)
    views.clear(1, 0, 90)  # folded from its log, which starts at 90
    assert views.gap(1, 0) == 90
    views.clear(1, 0)  # a rebuild (truncation) folds the same log: same keys missing
    assert views.gap(1, 0) == 90
    store.close()
    store = RocksStore(path, fsync=False)
    views = ViewStore(store, PUTS)
    assert views.gap(1, 0) == 90  # stored
    view = SimpleNamespace(gap=90)
    partition = FakePartition(views, 90, 100)
    with pytest.raises(BrokerError) as refused:
        check_complete(partition, view, pb.BootstrapRequest())  # type: ignore[arg-type]
    assert refused.value.kind.name == "view_incomplete"
    assert refused.value.kind.code == grpc.StatusCode.UNAVAILABLE
    assert "lacks every key written only below offset 90" in str(refused.value)
    check_complete(partition, view, pb.BootstrapRequest(  # type: ignore[arg-type]
        allow_incomplete_view=True))
    views.mark_for_load(1, 0, 90)
    _load(views, partition, _source(upstream))
    assert views.gap(1, 0) == 0  # a complete upstream's view: complete
    views.mark_for_load(1, 0, 90)
    _load(views, partition, _source(upstream, gap=40))
    assert views.gap(1, 0) == 40  # the upstream's gap came with its view
    store.close()
