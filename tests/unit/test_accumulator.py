"""Goal: the producer's pure batching buffer (sdk/accumulator.py) batches,
bounds and encodes events exactly as the wire contract's column rules say.

Method: drive an Accumulator with explicit `now_ms` values and a counting
token factory (no loop, no clock); decode what it builds with the shared
core rules (`validate_batch`, `record_events`, `slot_of`) rather than with
the accumulator's own code, and let hypothesis pick keys and fields.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.accumulator import (
    EVENT_OVERHEAD_BYTES,
    INT64_MAX,
    INT64_MIN,
    Accumulator,
    SlotCache,
    WindowEvent,
    check_keys,
    chunk_bounds,
    fill_batch,
    split_columns,
    window_columns,
)
from sdk.core.columns import keys_of, record_events, validate_batch
from sdk.core.hashing import partition_of, slot_of
from sdk.core.pb import keybus_pb2 as pb

VALUE = b"v" * 100
EVENT_SIZE = len(VALUE) + EVENT_OVERHEAD_BYTES


def make(partitions: int = 1, linger_ms: int = 5, batch_events_max: int = 1000,
         batch_bytes_max: int = 1 << 20, buffer_events_max: int = 100_000) -> Accumulator[int]:
    counter = itertools.count()
    return Accumulator(partitions=partitions, linger_ms=linger_ms,
                       batch_events_max=batch_events_max, batch_bytes_max=batch_bytes_max,
                       buffer_events_max=buffer_events_max, new_token=lambda: next(counter))


def add(acc: Accumulator[int], key: Any, value: Any = VALUE, *, now_ms: int = 0,
        ordering_key: Any = None, partition: int | None = None, source: str = "",
        opcode: int = pb.UPSERT, schema: str = "", headers: Any = None,
        event_time_ms: int = 0) -> Any:
    return acc.add(key, value, ordering_key, partition, source, opcode, schema, headers,
                   event_time_ms, now_ms)


def as_record(batch: pb.EventBatch, base_offset: int = 0) -> pb.Record:
    record = pb.Record(topic="t", base_offset=base_offset, scn_first=1)
    record.batch.CopyFrom(batch)
    return record


# ---------------------------------------------------------------- readiness


def test_batch_is_ready_at_batch_events_max() -> None:
    acc = make(batch_events_max=3, linger_ms=1000)
    for k in range(4):
        add(acc, k)
    ready = acc.drain(now_ms=0)
    assert [r.count for r in ready] == [3]
    assert list(ready[0].batch.key_ints) == [0, 1, 2]
    assert acc.open_events == 1  # the fourth waits for its linger


def test_batch_is_ready_at_batch_bytes_max_and_never_passes_it() -> None:
    acc = make(batch_bytes_max=EVENT_SIZE * 2 + 10, linger_ms=1000)
    for k in range(5):
        add(acc, k)
    ready = acc.drain(now_ms=0)
    assert [r.count for r in ready] == [2, 2]
    assert acc.open_events == 1


def test_event_larger_than_batch_bytes_max_goes_alone() -> None:
    acc = make(batch_bytes_max=50, linger_ms=1000)
    add(acc, 1)
    add(acc, 2)
    assert [r.count for r in acc.drain(now_ms=0)] == [1, 1]


def test_batch_is_ready_after_linger() -> None:
    acc = make(linger_ms=5)
    add(acc, 1, now_ms=100)
    add(acc, 2, now_ms=103)
    assert acc.next_ready_ms() == 105
    assert acc.drain(now_ms=104) == []
    ready = acc.drain(now_ms=105)
    assert [r.count for r in ready] == [2]
    assert ready[0].created_ms == 100
    assert acc.next_ready_ms() is None


def test_linger_zero_is_ready_at_once_and_force_drains_all() -> None:
    acc = make(linger_ms=0)
    add(acc, 1, now_ms=7)
    assert [r.count for r in acc.drain(now_ms=7)] == [1]
    lazy = make(linger_ms=10_000, partitions=2)
    add(lazy, 1, partition=0)
    add(lazy, 2, partition=1)
    assert sorted(r.partition for r in lazy.drain(now_ms=0, force=True)) == [0, 1]


def test_sealed_batches_come_out_in_order_and_wake_is_raised() -> None:
    acc = make(batch_events_max=2, linger_ms=1000)
    assert not acc.wake
    for k in range(6):
        add(acc, k)
    assert acc.wake
    ready = acc.drain(now_ms=0)
    assert not acc.wake
    assert [list(r.batch.key_ints) for r in ready] == [[0, 1], [2, 3], [4, 5]]
    assert [r.token for r in ready] == [0, 1, 2]
    assert acc.next_ready_ms() is None


def test_seal_makes_a_partition_batch_ready_now() -> None:
    acc = make(linger_ms=1000, partitions=2)
    add(acc, 1, partition=1)
    acc.seal(1)
    acc.seal(0)  # nothing open there: no-op
    assert acc.next_ready_ms() == 0
    assert [r.partition for r in acc.drain(now_ms=0)] == [1]


# ---------------------------------------------------------------- buffer bound


def test_buffer_bound_refuses_then_release_gives_room() -> None:
    acc = make(buffer_events_max=5, batch_events_max=5)
    batches = [add(acc, k) for k in range(5)]
    assert all(b is not None for b in batches)
    assert add(acc, 99) is None
    assert acc.buffered_events == 5 and not acc.has_room()
    ready = acc.drain(now_ms=0)
    assert add(acc, 99) is None  # drained but unanswered: still counted
    acc.release(ready[0].count)
    assert acc.has_room(5)
    assert add(acc, 99) is not None


def test_reserve_counts_bulk_events_against_the_bound() -> None:
    acc = make(buffer_events_max=10, batch_events_max=10)
    add(acc, 1)
    assert acc.reserve(9)
    assert not acc.reserve(1)
    assert acc.buffered_events == 10
    acc.release(9)
    assert acc.reserve(9)


def test_tokens_are_one_per_batch_and_index_is_position() -> None:
    acc = make(batch_events_max=2, linger_ms=1000)
    first = add(acc, 1)
    index_first = first.count - 1
    second = add(acc, 2)
    third = add(acc, 3)
    assert first is second and first.token == 0
    assert (index_first, second.count - 1) == (0, 1)
    assert third.token == 1


# ---------------------------------------------------------------- columns


def test_int_keys_fill_key_ints_only() -> None:
    acc = make(linger_ms=0)
    for k in (1, -5, INT64_MAX, INT64_MIN):
        add(acc, k)
    batch = acc.drain(now_ms=0)[0].batch
    assert list(batch.key_ints) == [1, -5, INT64_MAX, INT64_MIN]
    assert not batch.key_strings
    assert list(batch.values) == [VALUE] * 4 and batch.count == 4
    validate_batch(batch, event_bytes_max=1 << 20, batch_events_max=1000)


def test_str_keys_fill_key_strings_only() -> None:
    acc = make(linger_ms=0)
    add(acc, "a")
    add(acc, "bé")
    batch = acc.drain(now_ms=0)[0].batch
    assert list(batch.key_strings) == ["a", "bé"] and not batch.key_ints
    validate_batch(batch, event_bytes_max=1 << 20, batch_events_max=1000)


def test_mixed_keys_fill_both_columns_per_the_key_rule() -> None:
    acc = make(linger_ms=0)
    for k in (1, "a", 0, "b"):
        add(acc, k)
    batch = acc.drain(now_ms=0)[0].batch
    assert list(batch.key_ints) == [1, 0, 0, 0]
    assert list(batch.key_strings) == ["", "a", "", "b"]
    assert keys_of(batch) == [1, "a", 0, "b"]
    validate_batch(batch, event_bytes_max=1 << 20, batch_events_max=1000)


def test_shared_optional_values_are_sent_once_as_broadcast() -> None:
    acc = make(linger_ms=0)
    for k in range(3):
        add(acc, k, source="orders", schema="v1", opcode=pb.DELETE, headers={"h": b"1"},
            event_time_ms=42)
    batch = acc.drain(now_ms=0)[0].batch
    assert list(batch.sources) == ["orders"]
    assert list(batch.schemas) == ["v1"]
    assert list(batch.opcodes) == [pb.DELETE]
    assert list(batch.event_times_ms) == [42]
    assert [dict(h.entries) for h in batch.headers] == [{"h": b"1"}]
    assert not batch.ordering_keys
    events = record_events(as_record(batch))
    assert {(e.source, e.schema, e.opcode, e.event_time_ms) for e in events} == {
        ("orders", "v1", pb.DELETE, 42)}


def test_optional_columns_start_mid_batch_and_pad_with_defaults() -> None:
    acc = make(linger_ms=0)
    add(acc, 1)
    add(acc, 2, source="s", ordering_key="o")
    add(acc, 3)
    batch = acc.drain(now_ms=0)[0].batch
    assert list(batch.sources) == ["", "s", ""]
    assert list(batch.ordering_keys) == ["", "o", ""]
    assert not batch.schemas and not batch.headers
    validate_batch(batch, event_bytes_max=1 << 20, batch_events_max=1000)


def test_slot_column_is_slot_of_ordering_key_else_key() -> None:
    acc = make(linger_ms=0)
    add(acc, 7)
    add(acc, "k")
    add(acc, 8, ordering_key="user-1")
    add(acc, 9, ordering_key=123)
    add(acc, 10, ordering_key="")  # empty: falls back to the key
    batch = acc.drain(now_ms=0)[0].batch
    assert list(batch.slots) == [slot_of(7), slot_of("k"), slot_of("user-1"), slot_of("123"),
                                 slot_of(10)]


def test_partition_is_slot_mod_partitions_unless_explicit() -> None:
    acc = make(partitions=4, linger_ms=0)
    for k in range(40):
        add(acc, k)
    add(acc, 1000, partition=3)
    by_partition = {r.partition: list(r.batch.key_ints) for r in acc.drain(now_ms=0)}
    for p, keys in by_partition.items():
        assert all(partition_of(slot_of(k), 4) == p for k in keys if k != 1000)
    assert 1000 in by_partition[3]


@pytest.mark.parametrize("key", [True, 1.5, "", None, b"x", INT64_MAX + 1, INT64_MIN - 1])
def test_bad_keys_raise_value_error_naming_key(key: Any) -> None:
    acc = make()
    with pytest.raises(ValueError, match="key"):
        add(acc, key)
    assert acc.buffered_events == 0


@pytest.mark.parametrize(("field", "value", "name"), [
    ("value", 5, "value"), ("partition", 2, "partition"), ("partition", -1, "partition"),
    ("source", 3, "source"), ("opcode", 7, "opcode"), ("headers", {"h": 1}, "headers"),
    ("ordering_key", 1.5, "ordering_key"), ("event_time_ms", "x", "event_time_ms"),
])
def test_bad_fields_raise_value_error_naming_them(field: str, value: Any, name: str) -> None:
    acc = make(partitions=2)
    with pytest.raises(ValueError, match=name):
        add(acc, 1, **{field: value})


def test_bytes_like_and_str_values_become_bytes() -> None:
    acc = make(linger_ms=0)
    add(acc, 1, bytearray(b"ab"))
    add(acc, 2, "é")
    assert list(acc.drain(now_ms=0)[0].batch.values) == [b"ab", "é".encode()]


keys_strategy = st.one_of(st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
                          st.text(min_size=1, max_size=8))
event_strategy = st.tuples(
    keys_strategy,
    st.binary(max_size=20),
    st.one_of(st.none(), st.text(max_size=5)),
    st.sampled_from(["", "a", "b"]),
    st.sampled_from([pb.UPSERT, pb.DELETE]),
    st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.binary(max_size=3),
                                         max_size=2)),
    st.integers(min_value=0, max_value=10),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(event_strategy, min_size=1, max_size=30))
def test_built_batches_decode_to_the_events_sent(events: list[tuple[Any, ...]]) -> None:
    acc = make(linger_ms=0, partitions=3)
    for key, value, ordering, source, opcode, headers, time_ms in events:
        add(acc, key, value, ordering_key=ordering, source=source, opcode=opcode,
            headers=headers, event_time_ms=time_ms)
    decoded = []
    for ready in acc.drain(now_ms=0):
        validate_batch(ready.batch, event_bytes_max=1 << 20, batch_events_max=1000)
        decoded.extend((ready.partition, e) for e in record_events(as_record(ready.batch)))
    assert len(decoded) == len(events)
    by_key: dict[Any, list[tuple[Any, ...]]] = {}
    for key, value, ordering, source, opcode, headers, time_ms in events:
        slot = slot_of(ordering or key)
        row = (partition_of(slot, 3), key, value, ordering or "", source, opcode,
               sorted((headers or {}).items()), time_ms, slot)
        by_key.setdefault(key, []).append(row)
    got: dict[Any, list[tuple[Any, ...]]] = {}
    for p, e in decoded:
        # Headers as sorted items: a protobuf map does not keep insertion order.
        got.setdefault(e.key, []).append((p, e.key, e.value, e.ordering_key, e.source,
                                          e.opcode, sorted(e.headers.items()),
                                          e.event_time_ms, e.slot))
    assert {k: sorted(v, key=repr) for k, v in got.items()} == {
        k: sorted(v, key=repr) for k, v in by_key.items()}


# ---------------------------------------------------------------- bulk and windows


def test_fill_batch_writes_columns_and_broadcasts() -> None:
    batch = pb.EventBatch()
    fill_batch(batch, [1, 2], [b"a", b"b"], [slot_of(1), slot_of(2)],
               {"sources": ["s"], "ordering_keys": ["x", "y"]})
    assert batch.count == 2 and list(batch.sources) == ["s"]
    assert list(batch.ordering_keys) == ["x", "y"]


def test_split_columns_by_partition_keeps_input_positions() -> None:
    keys = list(range(20))
    slots = [slot_of(k) for k in keys]
    parts = split_columns(keys, [b"v"] * 20, slots, None, 3, None)
    assert sorted(i for part in parts for i in part.indexes) == keys
    for part in parts:
        assert all(partition_of(s, 3) == part.partition for s in part.slots)
        assert part.keys == [keys[i] for i in part.indexes]
    explicit = split_columns(keys, [b"v"] * 20, slots, None, 3, 2)
    assert [(p.partition, len(p.keys)) for p in explicit] == [(2, 20)]


def test_chunk_bounds_respect_both_limits() -> None:
    assert chunk_bounds([10] * 5, events_max=2, bytes_max=1000) == [(0, 2), (2, 4), (4, 5)]
    assert chunk_bounds([10] * 5, events_max=100, bytes_max=25) == [(0, 2), (2, 4), (4, 5)]
    assert chunk_bounds([50, 1, 1], events_max=100, bytes_max=10) == [(0, 1), (1, 3)]
    assert chunk_bounds([], events_max=1, bytes_max=1) == []


def test_check_keys_names_the_bad_entry() -> None:
    assert check_keys([1, "a"]) == [1, "a"]
    with pytest.raises(ValueError, match=r"keys\[1\]"):
        check_keys([1, ""])


def test_window_columns_take_objects_and_dicts() -> None:
    keys, values, slots, extras = window_columns([
        WindowEvent(1, b"a", source="s1"),
        {"key": "k", "value": b"b", "source": "s2", "ordering_key": "o"},
    ])
    assert keys == [1, "k"] and values == [b"a", b"b"]
    assert slots == [slot_of(1), slot_of("o")]
    assert extras == {"ordering_keys": ["", "o"], "sources": ["s1", "s2"]}


def test_window_columns_name_the_bad_event() -> None:
    with pytest.raises(ValueError, match=r"events\[1\]\.key"):
        window_columns([WindowEvent(1, b"a"), WindowEvent("", b"b")])
    with pytest.raises(ValueError, match="unknown fields"):
        window_columns([{"key": 1, "value": b"", "colour": "red"}])


def test_slot_cache_matches_slot_of_and_stays_bounded() -> None:
    cache = SlotCache(entries_max=4)
    for k in [*range(10), "a", "b", 3]:
        assert cache.slot(k) == slot_of(k)
        assert len(cache._entries) <= 4


# ---------------------------------------------------------------- Nagle's rule (rule 1)


def test_an_idle_partition_sends_at_once_and_a_busy_one_gathers() -> None:
    acc = make(linger_ms=1000, partitions=2)
    add(acc, 1, partition=0, now_ms=10)
    add(acc, 2, partition=1, now_ms=10)
    add(acc, 3, partition=1, now_ms=11)
    assert acc.next_ready_ms(busy={1}) == 0  # partition 0 has nothing outstanding
    ready = acc.drain(now_ms=11, busy={1})
    assert [(r.partition, list(r.batch.key_ints)) for r in ready] == [(0, [1])]
    assert acc.next_ready_ms(busy={1}) == 1010  # partition 1 waits for its answer or linger
    assert acc.drain(now_ms=12, busy={1}) == []
    ready = acc.drain(now_ms=13, busy=set())  # the answer came: partition 1 is idle now
    assert [(r.partition, list(r.batch.key_ints)) for r in ready] == [(1, [2, 3])]


def test_a_busy_partition_still_sends_at_its_linger_and_when_full() -> None:
    acc = make(linger_ms=5, batch_events_max=3)
    add(acc, 1, now_ms=100)
    assert acc.drain(now_ms=104, busy={0}) == []
    assert [r.count for r in acc.drain(now_ms=105, busy={0})] == [1]
    for k in range(4):
        add(acc, k, now_ms=200)
    assert acc.has_sealed
    assert [r.count for r in acc.drain(now_ms=200, busy={0})] == [3]  # full goes, busy or not
    assert not acc.has_sealed
    assert acc.open_events == 1


def test_without_busy_the_linger_alone_decides() -> None:
    acc = make(linger_ms=5)
    add(acc, 1, now_ms=100)
    assert acc.next_ready_ms() == 105
    assert acc.drain(now_ms=101) == []
    assert [r.count for r in acc.drain(now_ms=101, busy=())] == [1]
