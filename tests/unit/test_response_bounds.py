"""Read and Bootstrap responses stay within their byte limit, framing included.

Goal: `bytes_max` (4 MiB by default: gRPC's default receive limit in every
language) bounds the whole response message, so a client built from the proto
with default settings can read any topic; before, a read ran one record past
the limit and a Bootstrap snapshot chunk was bounded by events only (3,000
events of 60 KB gave a 180 MB message, over the broker's own send limit, and
the bootstrap failed every time). Each chunk still moves on: a record or an
entry larger than the limit goes out alone.
Method: a real RocksDB store in a temp dir with records of large values, read
in chunks at budgets around the records' sizes; each chunk framed as the
servicers frame it (broker/rpc/wire.py, broker/view/bootstrap.py) with the
largest values of its other fields (and the incarnation a stream's first
message names), and measured.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log import codec as log_codec
from broker.log.rocks_store import Append, RocksStore
from broker.read_path import ReadSpec, read_chunk
from broker.rpc import wire
from broker.rpc.wire import read_response
from broker.topics import new_incarnation
from broker.view.bootstrap import INCARNATION_TAG as BOOTSTRAP_INCARNATION_TAG
from broker.view.bootstrap import response as bootstrap_response
from broker.view.snapshot import Position, SnapshotCursor, SnapshotSpec
from broker.view.store import ViewStore
from sdk.core.columns import record_events
from sdk.core.pb import keybus_pb2 as pb

RECORDS, EVENTS, VALUE_BYTES = 12, 3, 700
FAR = 2**63  # the largest offsets: the longest varints


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RocksStore]:
    store = RocksStore(str(tmp_path / "db"), fsync=False)
    appends = []
    for n in range(RECORDS):
        base = n * EVENTS
        batch = pb.EventBatch(count=EVENTS, key_ints=list(range(base, base + EVENTS)),
                              values=[bytes([n]) * VALUE_BYTES] * EVENTS, sources=["s"])
        body = pb.Record(topic="t", partition=0, base_offset=base, scn_first=base + 1,
                         publish_time_ms=1, batch=batch).SerializeToString()
        appends.append(Append(base, base + 1, EVENTS, False,
                              log_codec.encode_record(body, 1, EVENTS, base + 1, False)))
    store.append(1, 0, appends, {}, 0, 0)
    yield store
    store.close()


def test_a_read_response_stays_within_bytes_max(store: RocksStore) -> None:
    one_record = len(next(iter(read_chunk(store, _read_spec(1 << 20), 0).records)))
    for budget in [one_record - 1, *range(one_record, 3 * one_record + 80, 7)]:
        offsets, start = [], 0
        for _ in range(RECORDS + 1):
            chunk = read_chunk(store, _read_spec(budget), start)
            if not chunk.records:
                break
            message = read_response(chunk.records, FAR, FAR, FAR)
            assert len(message) <= budget or len(chunk.records) == 1, (budget, len(message))
            offsets += [o for r in chunk.records for o in _offsets(pb.Record.FromString(r))]
            start = chunk.next_offset
        assert offsets == list(range(RECORDS * EVENTS)), budget


@pytest.mark.parametrize("phase", [pb.CATCHUP, pb.ONLINE])
def test_a_bootstrap_log_message_stays_within_bytes_max(store: RocksStore, phase: int) -> None:
    """The catch-up and online messages carry read_chunk's chunks with a phase and a
    resume point besides the offsets, and the first names the topic's incarnation
    (a resumed catch-up's first message has records): the chunk's reserve holds them
    all. The old reserve (a ReadResponse's fields and the incarnation) was 17 bytes short."""
    one_record = len(next(iter(read_chunk(store, _read_spec(1 << 20), 0).records)))
    head = wire.incarnation_field(new_incarnation(), BOOTSTRAP_INCARNATION_TAG)
    for budget in [one_record - 1, *range(one_record, 3 * one_record + 80, 7)]:
        offsets, start = [], 0
        for _ in range(RECORDS + 1):
            chunk = read_chunk(store, _read_spec(budget), start)
            if not chunk.records:
                break
            resume = pb.BootstrapResume(phase=phase, next_offset=FAR, target_offset=FAR)
            message = head + bootstrap_response(chunk.records, FAR, FAR, phase, resume)
            assert len(message) <= budget or len(chunk.records) == 1, (budget, len(message))
            offsets += [o for r in chunk.records for o in _offsets(pb.Record.FromString(r))]
            start = chunk.next_offset
        assert offsets == list(range(RECORDS * EVENTS)), budget


def test_a_bootstrap_snapshot_chunk_stays_within_bytes_max(store: RocksStore) -> None:
    views = ViewStore(store)
    views.fold_pass(1, 0, RECORDS * EVENTS, 10_000)
    one_entry = VALUE_BYTES + 100
    head = wire.incarnation_field(new_incarnation(), BOOTSTRAP_INCARNATION_TAG)  # the first's
    for budget in [one_entry // 2, *range(one_entry, 6 * one_entry, 97)]:
        cursor = SnapshotCursor(views, _snapshot_spec(budget), Position(), None)
        keys: list[object] = []
        for _ in range(RECORDS * EVENTS + 1):
            chunk = cursor.next_chunk()
            records = [r.SerializeToString() for r in chunk.records]
            resume = pb.BootstrapResume(phase=pb.SNAPSHOT, snapshot_offset=FAR, has_source=True,
                                        source="s", has_key=True, key_int=-FAR)
            marker = pb.BootstrapMarker(phase=pb.SNAPSHOT, snapshot_offset=FAR,
                                        snapshot_scn=FAR, target_offset=FAR,
                                        consistent_offset=FAR)
            message = head + bootstrap_response(records, FAR, FAR, pb.SNAPSHOT, resume, marker)
            assert len(message) <= budget or chunk.events == 1, (budget, len(message))
            keys += [e.key for r in chunk.records for e in record_events(r)]
            if chunk.done:
                break
        assert keys == list(range(RECORDS * EVENTS)), budget


def _read_spec(bytes_max: int) -> ReadSpec:
    return ReadSpec(1, 0, None, 10_000, bytes_max, None, None)


def _snapshot_spec(bytes_max: int) -> SnapshotSpec:
    return SnapshotSpec("t", 1, 0, (), None, None, False, 10_000, bytes_max)


def _offsets(record: pb.Record) -> list[int]:
    return list(record.offsets) or list(range(record.base_offset,
                                              record.base_offset + record.batch.count))
