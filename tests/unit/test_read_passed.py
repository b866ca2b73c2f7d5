"""How a filtered follow read tells where it passed records its filter dropped whole.

Goal: the pure pieces behind ReadResponse.passed_scn. `read_chunk` says where
a chunk ends on records dropped whole (`Chunk.passed`: the last one's last SCN
and offset, a window's SCN for a window record, a plain batch's last event's),
and nothing when the chunk ends on a record it sends or is cut by its stop
(never inside a window). `PassedPositions` (broker/read_passed.py) tells a
position at most once per interval or per `events_max` dropped events, at
the log end within an interval, and forgets it once a response with records
covered it. `wire.passed_response` parses as the generated ReadResponse.
Method: a real RocksDB store in a temp dir holding a window record, a plain
batch and another window; scripted chunks and a fake clock for the pacer;
hypothesis for its bound over any script.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log import codec as log_codec
from broker.log.rocks_store import Append, RocksStore
from broker.read_passed import Passed, PassedPositions
from broker.read_path import ReadSpec, read_chunk
from broker.rpc import wire
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb

# (base offset, count, scn_first, window): offsets 0..3 one window (scn 1), 4..8 a plain
# batch (scns 2..6), 9..11 one window (scn 7).
RECORDS = [(0, 4, 1, True), (4, 5, 2, False), (9, 3, 7, True)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RocksStore]:
    store = RocksStore(str(tmp_path / "db"), fsync=False)
    appends = []
    for base, count, scn, window in RECORDS:
        keys = list(range(base, base + count))
        batch = pb.EventBatch(count=count, key_ints=keys, slots=slots_of(keys),
                              values=[b"v"] * count)
        body = pb.Record(topic="t", base_offset=base, scn_first=scn, window=window,
                         publish_time_ms=1, batch=batch).SerializeToString()
        appends.append(Append(base, scn, count, window,
                              log_codec.encode_record(body, 1, count, scn, window)))
    store.append(1, 0, appends, {}, 0, 0)
    yield store
    store.close()


def _keys_at_least(first: int) -> object:
    return lambda batch: [i for i, key in enumerate(batch.key_ints) if key >= first]


def _read(store: RocksStore, start: int, selector: object, stop: int = 12,
          events_max: int = 1000) -> tuple[int, tuple[int, int] | None, int]:
    spec = ReadSpec(topic_id=1, partition=0, stop_offset=stop, events_max=events_max,
                    bytes_max=1 << 20, slot_mask=None, selector=selector)  # type: ignore[arg-type]
    chunk = read_chunk(store, spec, start)
    return chunk.next_offset, chunk.passed, len(chunk.records)


def test_a_chunk_says_where_the_records_it_dropped_whole_end(store: RocksStore) -> None:
    nothing = _keys_at_least(100)
    assert _read(store, 0, nothing) == (12, (7, 11), 0)  # the last window: scn 7, offset 11
    assert _read(store, 0, nothing, stop=9) == (9, (6, 8), 0)  # a plain batch: its last scn
    assert _read(store, 0, nothing, events_max=1) == (9, (6, 8), 0)  # 8 x events_max scanned
    assert _read(store, 5, nothing, stop=9) == (9, (6, 8), 0)  # from inside a record


def test_a_chunk_ending_on_a_record_it_sends_or_cut_by_its_stop_says_nothing(
        store: RocksStore) -> None:
    assert _read(store, 0, _keys_at_least(11)) == (12, None, 1)  # the last record is sent
    assert _read(store, 0, _keys_at_least(5)) == (12, None, 2)  # records sent after drops
    assert _read(store, 0, _keys_at_least(9)) == (12, None, 1)
    assert _read(store, 0, _keys_at_least(100), stop=10) == (10, None, 0)  # inside a window
    assert _read(store, 0, None) == (12, None, 3)  # unfiltered: every record sent


def test_drops_after_a_sent_record_are_passed(store: RocksStore) -> None:
    assert _read(store, 0, lambda batch: [0] if batch.key_ints[0] == 0 else []) == \
        (12, (7, 11), 1)


def test_the_passed_response_parses_and_an_old_reader_sees_a_position() -> None:
    parsed = pb.ReadResponse.FromString(wire.passed_response(12, 40, 7, 11))
    assert (parsed.next_offset, parsed.end_offset, parsed.passed_scn, parsed.passed_offset) \
        == (12, 40, 7, 11)
    assert not parsed.records and not parsed.high_watermark
    assert pb.ReadResponse.FromString(wire.passed_response(1, 1, 1, 0)).passed_offset == 0
    plain = pb.ReadResponse.FromString(wire.read_response([], 12, 40))
    assert plain.passed_scn == 0  # every other response: not said


def test_a_position_is_told_once_the_interval_or_the_events_bound_is_reached() -> None:
    pacer = PassedPositions(interval_ms=1000, events_max=100, now_ms=0)
    assert pacer.due(0) is None and pacer.wait_ms(0) is None  # nothing passed yet
    pacer.process_chunk((5, 40), 40, False, now_ms=10)
    assert pacer.due(10) is None and pacer.wait_ms(10) == 990  # at the log end: wait that long
    assert pacer.due(1000) == Passed(5, 40)
    assert pacer.due(1000) is None and pacer.pending is None  # told once
    pacer.process_chunk((9, 99), 60, False, now_ms=1100)
    assert pacer.due(1100) is None
    pacer.process_chunk((12, 139), 40, False, now_ms=1200)  # 100 dropped events: due now
    assert pacer.due(1200) == Passed(12, 139)
    pacer.process_chunk((15, 160), 20, False, now_ms=1300)
    assert pacer.wait_ms(3000) == 0


def test_records_sent_cover_what_was_passed_before_them() -> None:
    pacer = PassedPositions(interval_ms=1000, events_max=100, now_ms=0)
    pacer.process_chunk((5, 40), 40, False, now_ms=10)
    pacer.process_chunk(None, 10, True, now_ms=2000)  # a response with records: covered
    assert pacer.pending is None and pacer.due(5000) is None
    pacer.process_chunk((8, 70), 30, True, now_ms=2100)  # records, then drops at its end
    assert pacer.due(2200) is None and pacer.wait_ms(2200) == 900
    assert pacer.take(2300) == Passed(8, 70)  # a response sent anyway carries it
    assert pacer.wait_ms(2300) is None


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 300), st.booleans(),
                          st.booleans()), max_size=60))
def test_positions_are_bounded_and_in_order(script: list[tuple[int, int, bool, bool]]) -> None:
    """Any script of chunks: between two positions told, the interval passed or
    events_max events were dropped; positions only move forward; the last one
    pending is told within an interval at the log end."""
    pacer = PassedPositions(interval_ms=1000, events_max=1000, now_ms=0)
    now = offset = last_ms = dropped = 0
    last_offset = -1
    for step_ms, events, dropped_whole, sent in script:
        now += step_ms
        offset += events + 1
        pacer.process_chunk((offset, offset) if dropped_whole else None, events, sent, now)
        if sent:  # a response with records: the interval and the count start again
            last_ms, dropped = now, 0
        else:
            dropped += events
        passed = pacer.due(now)
        if passed is not None:
            assert now - last_ms >= 1000 or dropped >= 1000
            assert last_offset < passed.offset <= offset
            last_ms, dropped, last_offset = now, 0, passed.offset
    wait = pacer.wait_ms(now)
    assert (wait is None) == (pacer.pending is None)
    assert wait is None or wait <= 1000
