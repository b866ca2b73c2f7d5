"""Records a dispatcher holds and the Delivery bytes it sends.

Goal: a consumer given a whole stored record gets its stored bytes
untouched; one given part of it gets a subset Record whose `offsets` and
per-event columns match exactly those events (broadcast columns kept as
they are); `window_last_offsets` names, per record sent, where the stored
record (a window) ends; redelivery counts and `nacks_seen` travel in the
message; the cache finds the record of any offset and evicts records once
all their offsets are acknowledged.

Method: worked examples on real stored-record bytes, each Delivery parsed
back with the generated protobuf classes; a hypothesis property that any
ascending choice of offsets over a few records round-trips (offsets, values,
keys and slots); eviction checked against a real `Cursor`.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.subscription.cursor import Cursor
from broker.subscription.delivery import CachedRecord, RecordCache, delivery_bytes
from sdk.core.columns import record_offsets
from sdk.core.pb import keybus_pb2 as pb


def stored(base: int, count: int, window: bool = False) -> CachedRecord:
    """A record as the log reader hands it over: bytes, parsed form, slots."""
    batch = pb.EventBatch(count=count, key_ints=[base + i for i in range(count)],
                          values=[f"v{base + i}".encode() for i in range(count)],
                          slots=[(base + i) * 7 % 65536 for i in range(count)],
                          sources=["db1"])  # a broadcast column: one entry for all
    record = pb.Record(topic="t", partition=0, base_offset=base, scn_first=1000 + base,
                       window=window, publish_time_ms=123, batch=batch)
    body = record.SerializeToString()
    return CachedRecord(base, count, body, pb.Record.FromString(body), list(batch.slots))


def parse(message: bytes) -> pb.Delivery:
    response = pb.SubscribeResponse.FromString(message)
    assert response.WhichOneof("body") == "delivery"
    return response.delivery


def cache_of(*records: CachedRecord) -> RecordCache:
    cache = RecordCache()
    for record in records:
        cache.add(record)
    return cache


def test_a_whole_record_goes_out_as_stored() -> None:
    record = stored(10, 4)
    delivery = parse(delivery_bytes(cache_of(record), [10, 11, 12, 13], None))
    assert [r.SerializeToString() for r in delivery.records] == [record.body]
    assert list(delivery.window_last_offsets) == [13]
    assert list(delivery.redelivery_counts) == []
    assert delivery.nacks_seen == 0


def test_a_subset_carries_offsets_and_picked_columns() -> None:
    record = stored(10, 5, window=True)
    delivery = parse(delivery_bytes(cache_of(record), [11, 14], [0, 2], nacks_seen=3))
    (subset,) = delivery.records
    assert record_offsets(subset) == [11, 14]
    assert subset.batch.count == 2
    assert list(subset.batch.key_ints) == [11, 14]
    assert list(subset.batch.values) == [b"v11", b"v14"]
    assert list(subset.batch.slots) == [record.slots[1], record.slots[4]]
    assert list(subset.batch.sources) == ["db1"]  # broadcast: kept whole
    assert (subset.base_offset, subset.scn_first, subset.window) == (10, 1010, True)
    assert subset.publish_time_ms == 123
    assert list(delivery.window_last_offsets) == [14]  # the window ends at 14 either way
    assert list(delivery.redelivery_counts) == [0, 2]
    assert delivery.nacks_seen == 3


def test_one_event_of_a_record() -> None:
    delivery = parse(delivery_bytes(cache_of(stored(0, 3)), [1], None))
    (subset,) = delivery.records
    assert record_offsets(subset) == [1]
    assert list(subset.batch.values) == [b"v1"]


def test_events_of_several_records_give_one_record_each() -> None:
    cache = cache_of(stored(0, 3), stored(3, 2), stored(5, 4))
    delivery = parse(delivery_bytes(cache, [1, 2, 3, 4, 8], None))
    assert [record_offsets(r) for r in delivery.records] == [[1, 2], [3, 4], [8]]
    assert list(delivery.window_last_offsets) == [2, 4, 8]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.data())
def test_any_choice_of_offsets_round_trips(counts: list[int], data: st.DataObject) -> None:
    records, base = [], 0
    for count in counts:
        records.append(stored(base, count))
        base += count
    chosen = sorted(data.draw(st.sets(st.integers(0, base - 1), min_size=1)))
    delivery = parse(delivery_bytes(cache_of(*records), chosen, None))
    got = [o for r in delivery.records for o in record_offsets(r)]
    assert got == chosen
    values = [v for r in delivery.records for v in r.batch.values]
    assert values == [f"v{o}".encode() for o in chosen]
    slots = [s for r in delivery.records for s in r.batch.slots]
    assert slots == [o * 7 % 65536 for o in chosen]


def test_cache_finds_records_and_refuses_out_of_order_adds() -> None:
    cache = cache_of(stored(0, 3), stored(10, 5))
    assert cache.find(2).base == 0
    assert cache.find(14).base == 10
    with pytest.raises(AssertionError):
        cache.find(5)  # between records: nothing holds it
    assert [r.base for r in cache.overlapping(2, 11)] == [0, 10]
    assert [r.base for r in cache.overlapping(3, 10)] == []
    with pytest.raises(AssertionError):
        cache.add(stored(12, 1))


def test_eviction_follows_the_cursor() -> None:
    cache = cache_of(stored(0, 3), stored(3, 3), stored(6, 3), stored(9, 3))
    cursor = Cursor()
    cursor.ack_ranges([(3, 5), (7, 9), (10, 11)])
    assert cache.evict_acked(cursor.is_range_acked, [(3, 5), (7, 9), (10, 11)]) == 0
    cursor.ack_ranges([(5, 6), (6, 7)])
    assert cache.evict_acked(cursor.is_range_acked, [(5, 6), (6, 7)]) == 2  # 3..5, 6..8
    assert [r.base for r in cache.overlapping(0, 12)] == [0, 9]
    cursor.ack_ranges([(0, 3)])  # the mark-delete moves to 9
    cache.evict_below(cursor.mark_delete)
    assert [r.base for r in cache.overlapping(0, 12)] == [9]
    assert len(cache) == 1
    assert cache.evict_acked(cursor.is_range_acked, []) == 0
    cache.clear()
    assert len(cache) == 0
