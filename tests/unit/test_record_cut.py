"""Subsets of stored records cut in C (broker/subscription/_record_cut.c, record_cut.py).

Goal: the C cut gives the subset the protobuf classes build
(`CachedRecord.proto_subset_bytes`): the same parsed Record for every record
and set of positions, and the same bytes wherever the serializer's output is
deterministic (a `headers` map of several entries is not); bytes it does not
expect, and positions out of range, give None and the delivery path cuts them
in Python instead (when the module is used: tests/unit/test_native.py).

Method: the hypothesis strategy of the Python cut's tests (every column with
no entry, one broadcast entry or one per event; keys and times negative and
large) with positions in any order, repeats included; hand-laid bytes for
each kind of layout the walk refuses. Skipped only where the module was not
built (an install without a C compiler); CI builds it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.rpc.wire import varint
from broker.subscription import record_cut
from broker.subscription.delivery import CachedRecord, RecordCache, _one_part, delivery_messages
from sdk.core.pb import keybus_pb2 as pb
from tests.unit.test_subscription_subset_wire import cached, damage, records

pytestmark = pytest.mark.skipif(not record_cut.NATIVE,
                                reason="the native record cutter was not built")


def cut(entry: CachedRecord, positions: list[int]) -> bytes | None:
    return record_cut.cut(entry.body, entry.header(), entry.base, entry.count,
                          np.array(positions, np.int64))


@settings(max_examples=400, deadline=None)
@given(records(), st.data())
def test_the_c_cut_is_the_subset_protobuf_builds(drawn: tuple[pb.Record, int],
                                                 data: st.DataObject) -> None:
    record, base = drawn
    count = record.batch.count
    positions = data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=2 * count))
    if data.draw(st.booleans()):
        positions = sorted(set(positions))  # as dispatchers ask: ascending, once each
    entry = cached(record.SerializeToString(), base)
    made = cut(entry, positions)
    assert made is not None  # protobuf's own bytes are always laid out as expected
    built = entry.proto_subset_bytes(positions)
    assert pb.Record.FromString(made) == pb.Record.FromString(built)
    if not any(len(h.entries) > 1 for h in record.batch.headers):  # map order may differ
        assert made == built


@settings(max_examples=300, deadline=None)
@given(records(), st.data())
def test_a_delivery_framed_in_c_is_the_one_python_frames(drawn: tuple[pb.Record, int],
                                                         data: st.DataObject) -> None:
    record, base = drawn
    count = record.batch.count
    positions = sorted(data.draw(st.sets(st.integers(0, count - 1), min_size=1)))
    last = data.draw(st.integers(0, 1 << 63))
    nacks_seen = data.draw(st.sampled_from([0, 1, 300, 1 << 40]))
    send = data.draw(st.sampled_from([0, 1, 1 << 33]))
    entry = cached(record.SerializeToString(), base)
    subset = entry.proto_subset_bytes(positions)
    framed = record_cut.delivery(entry.body, entry.header(), base, count,
                                 np.array(positions, np.int64), last, nacks_seen, send,
                                 1 << 30)
    assert isinstance(framed, bytes)
    expected = _one_part(subset, last, nacks_seen, send)
    assert pb.SubscribeResponse.FromString(framed) == pb.SubscribeResponse.FromString(expected)
    if not any(len(h.entries) > 1 for h in record.batch.headers):  # map order may differ
        assert framed == expected


def test_a_subset_over_the_message_limit_is_split_in_python() -> None:
    values = [bytes([i]) * 100 for i in range(10)]
    record = pb.Record(topic="t", base_offset=50, batch=pb.EventBatch(
        count=10, key_ints=list(range(10)), values=values))
    body = record.SerializeToString()
    entry = cached(body, 50, cuttable=True)
    positions = np.arange(1, 9, dtype=np.int64)
    assert record_cut.delivery(body, entry.header(), 50, 10, positions, 59, 0, 0, 300) is False
    cache = RecordCache(1 << 20)
    cache.add(entry)
    messages, gone = delivery_messages(cache, positions + 50, None, 0, 300, 4, entry)
    assert not len(gone) and len(messages) > 1  # in parts that fit, as in Python
    assert entry.cuttable  # too large is no reason to stop cutting in C
    delivered = [pb.SubscribeResponse.FromString(m).delivery for m in messages]
    sent = [v for d in delivered for r in d.records for v in r.batch.values]
    assert sent == values[1:9]


@settings(max_examples=500, deadline=None)
@given(records(), st.data())
def test_damaged_bytes_never_crash_and_a_cut_they_give_is_protobufs(
        drawn: tuple[pb.Record, int], data: st.DataObject) -> None:
    """Bytes with a few bytes changed, cut or dropped: None, or what protobuf makes of them."""
    record, base = drawn
    damaged = damage(record.SerializeToString(), data)
    if not damaged:
        return
    count = data.draw(st.integers(1, 45))
    positions = np.array(sorted(data.draw(st.sets(st.integers(0, count - 1), min_size=1))),
                         np.int64)
    made = record_cut.cut(damaged, b"", base, count, positions)
    try:
        parsed = pb.Record.FromString(damaged)
    except Exception:  # protobuf refuses them: they never reach a cache
        return
    if made is None:
        return
    entry = CachedRecord(base, count, damaged, parsed, np.zeros(count, np.int32))
    built = entry.proto_subset_bytes(positions.tolist())
    expected = pb.Record.FromString(built)
    expected.ClearField("topic")  # the head is the caller's (b"" here)
    expected.ClearField("partition")
    expected.ClearField("base_offset")
    expected.ClearField("scn_first")
    expected.ClearField("window")
    expected.ClearField("publish_time_ms")
    assert pb.Record.FromString(made) == expected


def test_the_delivery_path_uses_the_c_cut_and_keeps_the_stored_bytes_whole() -> None:
    record = pb.Record(topic="t", base_offset=100, batch=pb.EventBatch(
        count=100, key_ints=list(range(100)), values=[b"v%d" % i for i in range(100)]))
    body = record.SerializeToString()
    entry = cached(body, 100, cuttable=True)
    reference = cached(body, 100)
    for positions in ([0], [3, 5, 99], list(range(1, 100, 2))):
        assert entry.subset_bytes(np.array(positions, np.int64)) == \
            reference.subset_bytes(positions)
    assert entry.layout is None and entry.picked_small == 0  # no Python path was taken
    assert entry.cuttable
    assert entry.subset_bytes(range(100)) == body


def test_positions_out_of_range_give_none() -> None:
    entry = cached(pb.Record(batch=pb.EventBatch(
        count=3, key_ints=[1, 2, 3], values=[b"a", b"b", b"c"])).SerializeToString(), 0)
    assert cut(entry, [3]) is None
    assert cut(entry, [-1]) is None
    assert cut(entry, []) is None
    assert cut(entry, [2]) is not None


def test_positions_of_another_integer_type_are_taken_as_int64() -> None:
    entry = cached(pb.Record(batch=pb.EventBatch(
        count=3, key_ints=[1, 2, 3], values=[b"a", b"b", b"c"])).SerializeToString(), 5)
    wide = record_cut.cut(entry.body, entry.header(), 5, 3, np.array([0, 2], np.int32))
    strided = record_cut.cut(entry.body, entry.header(), 5, 3, np.arange(0, 4, dtype=np.int64)[::2])
    assert wide == strided == entry.proto_subset_bytes([0, 2])


def test_positions_the_module_cannot_read_raise_a_type_error() -> None:
    from broker.subscription import _record_cut
    entry = cached(pb.Record(batch=pb.EventBatch(
        count=3, key_ints=[1, 2, 3], values=[b"a", b"b", b"c"])).SerializeToString(), 0)
    for positions in ([0, 2], np.array([0.0, 2.0]), np.array([0, 2], np.int32), b"\0" * 16):
        with pytest.raises(TypeError):
            _record_cut.cut(entry.body, b"", 0, 3, positions)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            _record_cut.delivery(entry.body, b"", 0, 3, positions,  # type: ignore[arg-type]
                                 2, 0, 0, 1 << 20)


def hand_laid_batch(batch: bytes) -> CachedRecord:
    return cached(b"\x18\x07" + b"\x3a" + varint(len(batch)) + batch, 7, cuttable=True)


VALUES = b"".join(b"\x32\x02" + b"v%d" % i for i in range(3))


@pytest.mark.parametrize("batch", [
    # key_ints as one varint per element (allowed on the wire, never written by protobuf)
    b"\x08\x03" + b"".join(b"\x10" + varint(2 * k) for k in (5, 6, 7)) + VALUES,
    # a packed column in two pieces
    b"\x08\x03\x12\x02\x0a\x0c\x12\x01\x0e" + VALUES,
    # a varint longer than it needs to be (0 in two bytes)
    b"\x08\x03\x12\x04\x80\x00\x0c\x0e" + VALUES,
    # a slot above 32 bits
    b"\x08\x03\x2a\x07\x01\x02\x80\x80\x80\x80\x10" + VALUES,
    # an opcode that is no int32
    b"\x08\x03\x42\x07\x01\x01\x80\x80\x80\x80\x10" + VALUES,
    # a group (wire type 3)
    b"\x08\x03\x7b" + VALUES,
    # truncated: a value's length past the end
    b"\x08\x03" + VALUES + b"\x32\x09v",
], ids=["not-packed", "two-pieces", "long-varint", "wide-slot", "wide-opcode", "group",
        "truncated"])
def test_bytes_laid_out_otherwise_give_none_and_come_out_in_python(batch: bytes) -> None:
    body = b"\x18\x07" + b"\x3a" + varint(len(batch)) + batch
    assert record_cut.cut(body, b"", 7, 3, np.array([0, 2], np.int64)) is None
    try:
        record = pb.Record.FromString(body)
    except Exception:  # bytes protobuf refuses never reach a cache
        return
    entry = CachedRecord(7, 3, body, record, np.zeros(3, np.int32), cuttable=True)
    subset = pb.Record.FromString(entry.subset_bytes([0, 2]))
    assert not entry.cuttable  # found once: later subsets go straight to Python
    assert list(subset.offsets) == [7, 9]
    assert list(subset.batch.values) == [b"v0", b"v2"]


def test_unknown_fields_and_elements_in_two_runs_are_cut_as_protobuf_cuts_them() -> None:
    split = b"\x08\x03" + VALUES[:4] + b"\x12\x03\x02\x04\x06" + VALUES[4:]  # ints between
    unknown = b"\x08\x03" + VALUES + b"\x78\x01"  # field 15
    for batch in (split, unknown):
        entry = hand_laid_batch(batch)
        assert cut(entry, [1, 2]) == entry.proto_subset_bytes([1, 2])
