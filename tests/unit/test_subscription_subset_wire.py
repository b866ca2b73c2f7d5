"""Subsets of a stored record cut from its bytes (broker/subscription/subset_wire.py).

Goal: a subset cut from the stored bytes is exactly the subset the protobuf
classes build (`CachedRecord.proto_subset_bytes`, the way every subset was
built before): the same parsed Record, and the same bytes wherever the
serializer's output is deterministic (a `headers` map of several entries is
not); bytes laid out otherwise than protobuf writes them give no layout, and
their subsets still come out right through the protobuf classes.

Method: hypothesis properties over random records (every column, each with
no entry, one broadcast entry or one per event; keys and times negative and
large; strings and values of any length, equal or not, so that both the
equal-size rows and the element walk are used) and random ascending
positions; worked examples of bytes laid out by hand.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.rpc.wire import varint
from broker.subscription import subset_wire
from broker.subscription.delivery import SMALL_RECORD_EVENTS, CachedRecord
from sdk.core.pb import keybus_pb2 as pb

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
TEXT = st.text(max_size=140)
BLOB = st.binary(max_size=300)


@st.composite
def columns(draw: st.DrawFn, count: int, element: st.SearchStrategy[object],
            required: bool = False) -> list[object]:
    """A column under the broadcast rule: no entry, one, or one per event; sometimes
    every entry the same (the equal-size rows of the layout)."""
    shape = "full" if required else draw(st.sampled_from(["none", "one", "full", "same"]))
    if shape == "none":
        return []
    if shape == "one":
        return [draw(element)]
    if shape == "same":
        return [draw(element)] * count
    return draw(st.lists(element, min_size=count, max_size=count))


@st.composite
def records(draw: st.DrawFn) -> tuple[pb.Record, int]:
    count = draw(st.integers(1, 40))
    base = draw(st.integers(0, (1 << 62)))
    batch = pb.EventBatch(count=count)
    keys_as_strings = draw(st.booleans())
    batch.key_ints.extend(draw(columns(count, INT64, required=not keys_as_strings)))
    batch.key_strings.extend(draw(columns(count, TEXT, required=keys_as_strings)))
    batch.ordering_keys.extend(draw(columns(count, TEXT)))
    batch.slots.extend(draw(columns(count, st.integers(0, 65535))))
    batch.values.extend(draw(columns(count, BLOB, required=True)))
    batch.sources.extend(draw(columns(count, TEXT)))
    batch.opcodes.extend(draw(columns(count, st.sampled_from([pb.UPSERT, pb.DELETE]))))
    batch.schemas.extend(draw(columns(count, TEXT)))
    headers = st.dictionaries(st.text(max_size=8), st.binary(max_size=20), max_size=3)
    for entries in draw(columns(count, headers)):
        batch.headers.add().entries.update(entries)  # type: ignore[arg-type]
    batch.event_times_ms.extend(draw(columns(count, INT64)))
    record = pb.Record(topic=draw(st.text(max_size=20)), partition=draw(st.integers(0, 99)),
                       base_offset=base, scn_first=draw(st.integers(0, 1 << 63)),
                       window=draw(st.booleans()), publish_time_ms=draw(INT64), batch=batch,
                       producer_id=draw(st.integers(0, 1 << 40)),
                       leader_epoch=draw(st.integers(0, 9)))
    return record, base


def damage(body: bytes, data: st.DataObject) -> bytes:
    """`body` with one to four bytes changed, cut or dropped (b"": nothing left)."""
    damaged = bytearray(body)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        change = data.draw(st.sampled_from(["set", "cut", "drop"]))
        if change == "set":
            damaged[at] = data.draw(st.integers(0, 255))
        elif change == "cut":
            del damaged[at:]
        else:
            del damaged[at]
        if not damaged:
            break
    return bytes(damaged)


def cached(body: bytes, base: int, cuttable: bool = False) -> CachedRecord:
    """A cached record; `cuttable` False: its subsets take the Python paths tested
    here, whether or not the C cut was built (tests/unit/test_record_cut.py)."""
    record = pb.Record.FromString(body)
    return CachedRecord(base, record.batch.count, body, record,
                        np.zeros(record.batch.count, np.int32), cuttable=cuttable)


@settings(max_examples=300, deadline=None)
@given(records(), st.data())
def test_a_subset_from_bytes_is_the_subset_protobuf_builds(
        drawn: tuple[pb.Record, int], data: st.DataObject) -> None:
    record, base = drawn
    count = record.batch.count
    positions = sorted(data.draw(st.sets(st.integers(0, count - 1), min_size=1)))
    body = record.SerializeToString()
    layout = subset_wire.layout_of(body, pb.Record.FromString(body), base)
    assert layout is not None  # protobuf's own bytes always have a layout
    cut = subset_wire.subset_bytes(layout, np.array(positions, np.int64))
    built = cached(body, base).proto_subset_bytes(positions)
    assert pb.Record.FromString(cut) == pb.Record.FromString(built)
    if not any(len(h.entries) > 1 for h in record.batch.headers):  # map order may differ
        assert cut == built


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, (1 << 63) - 1), min_size=1, max_size=50), st.data())
def test_varints_picked_are_protobufs_packed_encoding(values: list[int],
                                                      data: st.DataObject) -> None:
    elements = subset_wire.varint_elements(np.array(values, np.int64))
    positions = sorted(data.draw(st.sets(st.integers(0, len(values) - 1), min_size=1)))
    picked = elements.pick(np.array(positions, np.int64))
    expected = pb.Record(offsets=[values[p] for p in positions]).SerializeToString()
    assert expected == b"\x42" + varint(len(picked)) + picked


def batch_of(count: int) -> pb.EventBatch:
    return pb.EventBatch(count=count, key_ints=list(range(count)),
                         values=[b"v%d" % i for i in range(count)])


def hand_laid(record_fields: bytes, base: int = 7, cuttable: bool = False) -> CachedRecord:
    return cached(record_fields, base, cuttable)


def test_a_numeric_column_not_packed_gives_no_layout_and_subsets_still_come_out() -> None:
    # key_ints as one varint per element (allowed on the wire, never written by protobuf)
    batch = b"\x08\x03" + b"".join(b"\x10" + varint(2 * k) for k in (5, 6, 7)) + \
        b"".join(b"\x32\x02" + b"v%d" % i for i in range(3))
    body = b"\x18\x07" + b"\x3a" + varint(len(batch)) + batch
    entry = hand_laid(body)
    assert subset_wire.layout_of(body, entry.record, 7) is None
    subset = pb.Record.FromString(entry.subset_bytes([0, 2]))
    assert list(subset.offsets) == [7, 9]
    assert list(subset.batch.key_ints) == [5, 7]
    assert list(subset.batch.values) == [b"v0", b"v2"]


def test_a_column_in_two_pieces_or_an_unknown_field_gives_no_layout() -> None:
    values = [b"\x32\x02" + b"v%d" % i for i in range(3)]
    split = b"\x08\x03" + values[0] + b"\x12\x01\x00" + values[1] + values[2]  # ints between
    unknown = b"\x08\x03" + b"".join(values) + b"\x78\x01"  # field 15
    for batch in (split, unknown):
        body = b"\x3a" + varint(len(batch)) + batch
        record = pb.Record.FromString(body)
        assert subset_wire.layout_of(body, record, 0) is None
        subset = pb.Record.FromString(hand_laid(body, 0).subset_bytes([1]))
        assert list(subset.batch.values) == [b"v1"]


def test_the_layout_is_found_once_and_kept_on_the_record() -> None:
    record = pb.Record(topic="t", base_offset=100, batch=batch_of(100))
    entry = cached(record.SerializeToString(), 100)
    entry.subset_bytes(list(range(1, 100, 2)))
    layout = entry.layout
    assert isinstance(layout, subset_wire.RecordLayout)
    entry.subset_bytes([0])
    assert entry.layout is layout
    assert entry.subset_bytes(range(100)) == entry.body  # the whole record: as stored


def test_a_small_record_s_subsets_come_from_the_parsed_record() -> None:
    """Finding a layout costs more than picking from a record of a few events."""
    count = SMALL_RECORD_EVENTS
    record = pb.Record(topic="t", base_offset=7, batch=batch_of(count))
    entry = cached(record.SerializeToString(), 7)
    reference = cached(record.SerializeToString(), 7)
    reference.layout = subset_wire.layout_of(reference.body, reference.record, 7)
    for positions in ([0], list(range(1, count, 2)), list(range(count - 1))):
        assert entry.subset_bytes(positions) == reference.subset_bytes(positions)
    assert entry.layout is None


def test_a_few_events_are_picked_from_the_parsed_record_until_a_quarter_was() -> None:
    record = pb.Record(topic="t", base_offset=0, batch=batch_of(100))
    entry = cached(record.SerializeToString(), 0)
    reference = cached(record.SerializeToString(), 0)
    for first in range(0, 40, 10):  # parts of 10 events: 40 picked in all
        positions = list(range(first, first + 10))
        assert entry.subset_bytes(positions) == reference.proto_subset_bytes(positions)
        assert (entry.layout is None) == (first + 10 <= 25)  # the layout past a quarter
    assert entry.picked_small == 20
