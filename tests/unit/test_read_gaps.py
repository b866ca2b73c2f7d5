"""A read chunk never skips offsets that retention removed while the read went on.

Goal: `read_chunk` reports offsets the read reached that are gone below the
partition's retention cut (`Chunk.removed`, which the Read stream turns into
OUT_OF_RANGE), after the records before them; and nothing else is taken for
loss: gaps compaction leaves (a record it emptied and deleted, a sparse record
that holds a few of its offsets), events a filter or hash range drops, a read
that starts at the cut. The cut is looked at only at a gap (the hot path is
one comparison per record).
Method: a real RocksDB store in a temp dir with 6 records of 5 events
(offsets 0..29); retention's delete (`RocksStore.trim`) and compaction's
rewrites (a delete, a sparse record) made on it directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import rocksdict

from broker import partition_positions as positions
from broker.errors import BrokerError
from broker.log import codec as log_codec
from broker.log.rocks_store import Append, RocksStore
from broker.read_path import ReadSpec, read_chunk, select_events
from sdk.core.columns import record_offsets
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb

RECORDS, EVENTS = 6, 5


def _record(base: int) -> pb.Record:
    keys = list(range(base, base + EVENTS))
    batch = pb.EventBatch(count=EVENTS, key_ints=keys, slots=slots_of(keys),
                          values=[b"v%d" % k for k in keys])
    return pb.Record(topic="t", partition=0, base_offset=base, scn_first=base + 1,
                     publish_time_ms=1, batch=batch)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RocksStore]:
    store = RocksStore(str(tmp_path / "db"), fsync=False)
    appends = [Append(base, base + 1, EVENTS, False, log_codec.encode_record(
        _record(base).SerializeToString(), 1, EVENTS, base + 1, False))
        for base in range(0, RECORDS * EVENTS, EVENTS)]
    store.append(1, 0, appends, {}, 0, 0)
    yield store
    store.close()


def _spec(stop: int | None = None, events_max: int = 1000,
          selector: object = None) -> ReadSpec:
    return ReadSpec(topic_id=1, partition=0, stop_offset=stop, events_max=events_max,
                    bytes_max=1 << 20, slot_mask=None, selector=selector)  # type: ignore[arg-type]


def _offsets(records: list[bytes]) -> list[int]:
    return [o for body in records for o in record_offsets(pb.Record.FromString(body))]


def _never() -> int:
    raise AssertionError("the retention cut was looked at without a gap")


def _trim(store: RocksStore, cut: int) -> None:
    """What a retention pass deletes: every record below `cut` (a record boundary)."""
    store.trim(1, 0, cut, cut + 1, cut, 0)


def test_offsets_retention_removed_after_the_read_started_are_reported(
        store: RocksStore) -> None:
    _trim(store, 15)  # the read's position (5) passed the up-front check before this
    chunk = read_chunk(store, _spec(), 5, lambda: 15)
    assert chunk.removed == (5, 15) and chunk.records == [] and chunk.next_offset == 5
    # Bounded by the read's stop: only what the read wanted is named.
    assert read_chunk(store, _spec(stop=12), 7, lambda: 15).removed == (7, 12)
    # Without the cut (a follower's copy), the read goes on past the gap as it always did.
    assert read_chunk(store, _spec(), 5, None).removed is None


def test_records_before_a_gap_come_first(store: RocksStore) -> None:
    _delete(store, 10)
    chunk = read_chunk(store, _spec(), 0, lambda: 15)
    assert _offsets(chunk.records) == list(range(10)) and chunk.next_offset == 10
    assert chunk.removed == (10, 15)


def test_a_read_at_or_past_the_cut_and_a_contiguous_read_look_at_nothing(
        store: RocksStore) -> None:
    assert read_chunk(store, _spec(), 0, _never).removed is None  # one comparison a record
    _trim(store, 15)
    for start in (15, 17, 29):
        chunk = read_chunk(store, _spec(), start, _never)
        assert chunk.removed is None and _offsets(chunk.records) == list(range(start, 30))


def test_filtered_out_events_are_not_loss(store: RocksStore) -> None:
    """A filter that passes only the last record: whole records with nothing to send."""
    def last_only(batch: pb.EventBatch) -> list[int]:
        return list(range(batch.count)) if batch.key_ints[0] >= 25 else []
    chunk = read_chunk(store, _spec(selector=last_only), 0, _never)
    assert chunk.removed is None and _offsets(chunk.records) == list(range(25, 30))
    assert chunk.next_offset == 30
    # Few events a chunk: chunks end at record boundaries, the next starts there.
    start, seen = 0, []
    for _ in range(RECORDS + 1):
        chunk = read_chunk(store, _spec(events_max=1, selector=last_only), start, _never)
        assert chunk.removed is None
        seen += _offsets(chunk.records)
        if chunk.next_offset == start:
            break
        start = chunk.next_offset
    assert seen == list(range(25, 30))


def test_gaps_compaction_leaves_are_not_loss(store: RocksStore) -> None:
    """Compaction deletes a record it emptied (10..14) and rewrites another as a
    sparse record holding offsets 16 and 18 of its span 15..19. A compacted topic
    never runs retention's delete, so its cut stays 0; a read is told nothing."""
    _delete(store, 10)
    sparse = select_events(_record(15), [1, 3]).SerializeToString()
    _put(store, 15, log_codec.encode_record(sparse, 1, EVENTS, 16, False, sparse=True))
    for start in (0, 10, 12, 15, 16, 17):
        chunk = read_chunk(store, _spec(), start, lambda: 0)
        expected = [o for o in [*range(10), 16, 18, *range(20, 30)] if o >= start]
        assert chunk.removed is None and _offsets(chunk.records) == expected, start
        assert chunk.next_offset == 30


def _delete(store: RocksStore, base: int) -> None:
    family, _ = store.column_family("log")
    batch = rocksdict.WriteBatch(raw_mode=True)
    batch.delete(log_codec.log_key(1, 0, base), family)
    store.write(batch, sync=False)


def _put(store: RocksStore, base: int, value: bytes) -> None:
    family, _ = store.column_family("log")
    batch = rocksdict.WriteBatch(raw_mode=True)
    batch.put(log_codec.log_key(1, 0, base), value, family)
    store.write(batch, sync=False)


def test_an_earliest_read_starts_at_the_cut_retention_is_making() -> None:
    """Retention sets its cut before its delete and moves the start offset after: an
    earliest read resolved in between started at the old start, met the gap and was
    told offsets it never asked for were removed (seen in test_retention_health)."""
    trimming = SimpleNamespace(start_offset=0, removing_below=400, end_offset=2_000,
                               log_end=2_000, meta=SimpleNamespace(name="t"), index=0)
    earliest = pb.StartPosition(earliest=True)
    assert positions.resolve_start(trimming, earliest) == 400  # type: ignore[arg-type]
    with pytest.raises(BrokerError, match="start offset 100 of t/0 was removed by retention"):
        positions.resolve_start(trimming, pb.StartPosition(offset=100))  # type: ignore[arg-type]
