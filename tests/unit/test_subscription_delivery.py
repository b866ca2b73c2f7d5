"""Records a dispatcher holds and the Delivery messages it sends.

Goal: a consumer given a whole stored record gets its stored bytes
untouched; one given part of it gets a subset Record whose `offsets` and
per-event columns match exactly those events (broadcast columns kept as
they are); `window_last_offsets` names, per record part sent, where the
stored record (a window) ends; redelivery counts and `nacks_seen` travel in
the message; no message is larger than its byte budget however many events
it carries (a record part is split in halves until it fits); the cache finds
the record of any offset, reports what it misses, and evicts by memory and
below the mark-delete.

Method: worked examples on real stored-record bytes, each Delivery parsed
back with the generated protobuf classes; hypothesis properties that any
ascending choice of offsets over a few records round-trips (offsets,
values, keys and slots), and that every message fits its budget.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.subscription.delivery import CachedRecord, RecordCache, delivery_messages
from sdk.core.columns import record_offsets
from sdk.core.pb import keybus_pb2 as pb

BIG = 1 << 30


def stored(base: int, count: int, window: bool = False, value_bytes: int = 0) -> CachedRecord:
    """A record as the log reader hands it over: bytes, parsed form, slots."""
    batch = pb.EventBatch(count=count, key_ints=[base + i for i in range(count)],
                          values=[f"v{base + i}".encode().ljust(value_bytes, b".")
                                  for i in range(count)],
                          slots=[(base + i) * 7 % 65536 for i in range(count)],
                          sources=["db1"])  # a broadcast column: one entry for all
    record = pb.Record(topic="t", partition=0, base_offset=base, scn_first=1000 + base,
                       window=window, publish_time_ms=123, batch=batch)
    body = record.SerializeToString()
    return CachedRecord(base, count, body, pb.Record.FromString(body),
                        np.array(batch.slots, np.int32))


def parse(message: bytes) -> pb.Delivery:
    response = pb.SubscribeResponse.FromString(message)
    assert response.WhichOneof("body") == "delivery"
    return response.delivery


def cache_of(*records: CachedRecord) -> RecordCache:
    cache = RecordCache(BIG)
    for record in records:
        cache.add(record)
    return cache


def delivery_bytes(cache: RecordCache, offsets: list[int], counts: list[int] | None,
                   nacks_seen: int = 0) -> bytes:
    messages, gone = delivery_messages(
        cache, np.array(offsets, np.int64),
        None if counts is None else np.array(counts, np.int32), nacks_seen, BIG)
    assert len(messages) == 1 and not len(gone)
    return messages[0]


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


def test_a_subset_sent_once_is_the_bytes_protobuf_writes_with_its_send_and_nacks_seen(
        ) -> None:
    """Following the tail (no redelivery counts), a part of one record takes a shorter
    path: its subset's header fields are serialized once per record and joined to
    the rest, and the message is framed at once. The bytes must be protobuf's own."""
    record = stored(20, 6, window=True)
    cache = cache_of(record)
    for offsets in ([21, 23], [20], [22, 24, 25]):  # the header made once, then reused
        messages, gone = delivery_messages(cache, np.array(offsets, np.int64), None, 4, BIG,
                                           send=77)
        assert len(messages) == 1 and not len(gone)
        delivery = parse(messages[0])
        assert (delivery.nacks_seen, delivery.send) == (4, 77)
        assert list(delivery.window_last_offsets) == [25]
        assert list(delivery.redelivery_counts) == []
        positions = [o - 20 for o in offsets]
        expected = pb.Record(topic="t", partition=0, base_offset=20, scn_first=1020,
                             window=True, publish_time_ms=123, offsets=offsets,
                             batch=pb.EventBatch(
                                 count=len(offsets), key_ints=offsets,
                                 values=[f"v{o}".encode() for o in offsets],
                                 slots=[record.slots[p] for p in positions], sources=["db1"]))
        assert record.subset_bytes(positions) == expected.SerializeToString()
        assert delivery.records[0] == expected


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


def test_messages_stay_within_their_budget() -> None:
    cache = cache_of(stored(0, 8, value_bytes=1000), stored(8, 8, value_bytes=1000))
    messages, gone = delivery_messages(cache, np.arange(16, dtype=np.int64),
                                       np.ones(16, np.int32), 5, 3000, send=42)
    assert not len(gone) and len(messages) > 4
    assert all(len(m) <= 3000 for m in messages)  # one event is about 1 KB
    parsed = [parse(m) for m in messages]
    assert [o for d in parsed for r in d.records for o in record_offsets(r)] == list(range(16))
    assert all(d.nacks_seen == 5 and d.send == 42 and len(d.redelivery_counts) == sum(
        r.batch.count for r in d.records) for d in parsed)
    assert next(w for d in parsed for w in d.window_last_offsets) == 7


def test_no_message_passes_its_budget_by_its_own_framing() -> None:
    """Budgets around a record's own size, where the fields around the record parts
    decide: every message within its budget (a plain gRPC client's 4 MiB limit)."""
    record = stored(0, 4, value_bytes=1000)
    whole, subset = np.arange(4, dtype=np.int64), np.arange(1, 4, dtype=np.int64)
    size = len(record.body)
    for budget in range(size - 40, size + 120):
        for offsets, counts in ((whole, None), (subset, None),
                                (whole, np.full(4, 3, np.int32))):
            cache = cache_of(stored(0, 4, value_bytes=1000))
            messages, _ = delivery_messages(cache, offsets, counts, 7, budget, send=1 << 40,
                                            open_windows=frozenset({3}))
            assert all(len(m) <= budget for m in messages), (budget, [len(m) for m in messages])
            got = [o for m in messages for r in parse(m).records for o in record_offsets(r)]
            assert got == offsets.tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=4), st.integers(200, 5000), st.data())
def test_every_message_fits_and_together_they_carry_everything(
        counts: list[int], budget: int, data: st.DataObject) -> None:
    records, base = [], 0
    for count in counts:
        records.append(stored(base, count, value_bytes=150))
        base += count
    chosen = sorted(data.draw(st.sets(st.integers(0, base - 1), min_size=1)))
    messages, _ = delivery_messages(cache_of(*records), np.array(chosen, np.int64), None, 0,
                                    budget)
    assert all(len(m) <= max(budget, 400) for m in messages)  # an event is about 200 bytes
    got = [o for m in messages for r in parse(m).records for o in record_offsets(r)]
    assert got == chosen


def test_the_events_of_one_record_newest_or_older_with_their_counts() -> None:
    cache = cache_of(stored(0, 4), stored(4, 4), stored(8, 4))
    for chosen in ([1, 3], [5, 6, 7], [9], [8, 9, 10, 11]):
        counts = np.arange(1, len(chosen) + 1, dtype=np.int32)
        messages, gone = delivery_messages(cache, np.array(chosen, np.int64), counts, 2, BIG,
                                           send=3)
        assert not len(gone)
        (delivery,) = [parse(m) for m in messages]
        assert [o for r in delivery.records for o in record_offsets(r)] == chosen
        assert list(delivery.redelivery_counts) == counts.tolist()
        assert list(delivery.window_last_offsets) == [chosen[0] // 4 * 4 + 3]
        assert delivery.nacks_seen == 2 and delivery.send == 3
    assert cache.holding(5, 7) is cache.find(4) and cache.holding(11, 11) is cache.find(8)
    assert cache.holding(3, 4) is None and cache.holding(12, 12) is None
    assert RecordCache(BIG).holding(0, 0) is None


def test_offsets_whose_record_is_gone_are_reported() -> None:
    cache = cache_of(stored(0, 3))
    messages, gone = delivery_messages(cache, np.array([1, 7], np.int64), None, 0, BIG)
    assert gone.tolist() == [7]
    assert [record_offsets(r) for r in parse(messages[0]).records] == [[1]]


def test_cache_finds_misses_and_evicts_by_memory_and_mark_delete() -> None:
    cache = cache_of(stored(0, 3), stored(10, 5))
    assert cache.find(2).base == 0  # type: ignore[union-attr]
    assert cache.find(14).base == 10  # type: ignore[union-attr]
    assert cache.find(5) is None  # between records: nothing holds it
    assert cache.missing(np.array([1, 5, 12, 20], np.int64)).tolist() == [5, 20]
    cache.add(stored(0, 3))  # already there: ignored
    assert len(cache) == 2
    cache.trim(3)  # the first record is wholly acknowledged
    assert len(cache) == 1 and cache.find(1) is None
    small = RecordCache(3 * len(stored(6, 3).body) + 1)
    for record in (stored(0, 3), stored(3, 3), stored(6, 3)):
        small.add(record)
    small.trim(-1)  # over its memory budget: the oldest go first
    assert small.find(1) is None and small.find(7) is not None
    small.clear()
    assert len(small) == 0 and small.bytes == 0
