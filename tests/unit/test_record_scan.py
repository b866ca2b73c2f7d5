"""A stored record's slots and head read from its bytes (broker/subscription/_record_scan.c).

Goal: where the C scan answers, it gives what the dispatcher built from the
parsed record (the slot column, and the head `CachedRecord.header`
serializes from the parsed fields), and a record read through it behaves as
before; bytes laid out otherwise than protobuf writes them give None, and
both are built from the parsed record as before.

Method: the hypothesis records of the subset tests (every column with no
entry, one broadcast entry or one per event), hand-laid bytes for each layout
the scan refuses, and mutated bytes. Skipped only where the module was not
built (an install without a C compiler); CI builds it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log import codec
from broker.rpc.wire import varint
from broker.subscription import record_scan
from broker.subscription.delivery import CachedRecord
from broker.subscription.log_reader import parse_record
from sdk.core.pb import keybus_pb2 as pb
from tests.unit.test_subscription_subset_wire import damage, records

built = pytest.mark.skipif(not record_scan.NATIVE,
                           reason="the native record scanner was not built")


def head_of(record: pb.Record, base: int) -> bytes:
    """What `CachedRecord.header` serializes from a parsed record."""
    return pb.Record(topic=record.topic, partition=record.partition, base_offset=base,
                     scn_first=record.scn_first, window=record.window,
                     publish_time_ms=record.publish_time_ms).SerializeToString()


def stored(record: pb.Record) -> bytes:
    body = record.SerializeToString()
    return codec.encode_record(body, record.publish_time_ms, record.batch.count,
                               record.scn_first, record.window)


@built
@settings(max_examples=400, deadline=None)
@given(records())
def test_the_scan_gives_what_the_parse_gave(drawn: tuple[pb.Record, int]) -> None:
    record, base = drawn
    count = record.batch.count
    found = record_scan.scan(record.SerializeToString(), base, count)
    if len(record.batch.slots) != count:  # no slot per event: parsed (and computed)
        assert found is None
        return
    assert found is not None  # protobuf's own bytes, with a slot per event
    head, slots = found
    assert head == head_of(record, base)
    assert slots.dtype == np.int32 and slots.tolist() == list(record.batch.slots)


@built
@settings(max_examples=150, deadline=None)
@given(records())
def test_a_record_read_through_the_scan_is_kept_as_before(drawn: tuple[pb.Record, int]
                                                          ) -> None:
    record, base = drawn
    record.batch.ClearField("slots")
    record.batch.slots.extend(range(record.batch.count))
    entry = parse_record(base, stored(record))
    assert entry.subset_header is not None  # read by the scan, not serialized again
    assert entry.header() == head_of(record, base)
    assert entry.record == record
    assert entry.slots.tolist() == list(record.batch.slots)
    entry.slots[0] = entry.slots[0]  # a writable array, as the parsed path gives
    positions = list(range(0, record.batch.count, 2))
    reference = CachedRecord(base, record.batch.count, entry.body, record, entry.slots,
                             cuttable=False)
    assert pb.Record.FromString(entry.subset_bytes(positions)) == \
        pb.Record.FromString(reference.subset_bytes(positions))


def _field(number: int, wire: int, payload: bytes) -> bytes:
    return varint((number << 3) | wire) + payload


def _batch(slots: list[int], count: int | None = None) -> bytes:
    count = len(slots) if count is None else count
    packed = b"".join(varint(s) for s in slots)
    body = _field(1, 0, varint(count)) + _field(2, 2, varint(count) + bytes(range(count)))
    if slots:
        body += _field(5, 2, varint(len(packed)) + packed)
    values = b"".join(_field(6, 2, b"\x01v") for _ in range(count))
    return _field(7, 2, varint(len(body + values)) + body + values)


@built
@pytest.mark.parametrize(("why", "body", "base"), [
    ("base_offset is not the record's key", _field(3, 0, varint(8)) + _batch([1, 2]), 7),
    ("no base_offset for a key above 0", _field(1, 2, b"\x01t") + _batch([1, 2]), 7),
    ("a base_offset of 0 written out", _field(3, 0, b"\x00") + _batch([1, 2]), 0),
    ("a varint longer than needed", _field(3, 0, b"\x87\x00") + _batch([1, 2]), 7),
    ("head fields out of order", _field(3, 0, b"\x07") + _field(2, 0, b"\x01") +
     _batch([1, 2]), 7),
    ("a head field after the batch", _field(3, 0, b"\x07") + _batch([1, 2]) +
     _field(4, 0, b"\x01"), 7),
    ("window other than true", _field(3, 0, b"\x07") + _field(5, 0, b"\x02") +
     _batch([1, 2]), 7),
    ("a topic that is not UTF-8", _field(1, 2, b"\x01\xff") + _field(3, 0, b"\x07") +
     _batch([1, 2]), 7),
    ("a head field of another wire type", _field(2, 2, b"\x01a") + _field(3, 0, b"\x07") +
     _batch([1, 2]), 7),
    ("two batches", _field(3, 0, b"\x07") + _batch([1, 2]) + _batch([1, 2]), 7),
    ("no slot column", _field(3, 0, b"\x07") + _batch([]), 7),
    ("fewer slots than events", _field(3, 0, b"\x07") + _batch([1], count=2), 7),
    ("a slot above int32", _field(3, 0, b"\x07") + _batch([1, 1 << 31]), 7),
    ("truncated", (_field(3, 0, b"\x07") + _batch([1, 2]))[:-3], 7),
])
def test_bytes_laid_out_otherwise_are_parsed(why: str, body: bytes, base: int) -> None:
    assert record_scan.scan(body, base, 2) is None, why


@built
def test_hand_laid_bytes_as_protobuf_writes_them_are_scanned() -> None:
    """The layouts above, with what each breaks put right, are read: the refusals are
    each for the reason named."""
    body = _field(1, 2, b"\x01t") + _field(3, 0, b"\x07") + _field(5, 0, b"\x01") + \
        _batch([1, 2]) + _field(11, 0, b"\x05")
    found = record_scan.scan(body, 7, 2)
    assert found is not None
    assert found[0] == pb.Record(topic="t", base_offset=7, window=True).SerializeToString()
    assert found[1].tolist() == [1, 2]
    assert record_scan.scan(_batch([4, 5]), 0, 2) is not None  # a key of 0: no base_offset
    assert record_scan.scan(body, 7, 3) is None  # the header's count differs


@built
@settings(max_examples=500, deadline=None)
@given(records(), st.data())
def test_damaged_bytes_never_crash_and_a_scan_of_bytes_protobuf_reads_agrees(
        drawn: tuple[pb.Record, int], data: st.DataObject) -> None:
    record, base = drawn
    damaged = damage(record.SerializeToString(), data)
    if not damaged:
        return
    count = data.draw(st.integers(1, 45))
    found = record_scan.scan(damaged, base, count)
    try:
        parsed = pb.Record.FromString(damaged)
    except Exception:  # protobuf refuses them: parse_record never scans them
        return
    if found is None:
        return
    assert found[0] == head_of(parsed, base) and parsed.base_offset == base
    assert found[1].tolist() == list(parsed.batch.slots) and len(found[1]) == count


@settings(max_examples=100, deadline=None)
@given(records())
def test_without_the_scan_a_record_is_kept_the_same(drawn: tuple[pb.Record, int],
                                                    ) -> None:
    """The Python path (no compiler, `KEYBUS_PURE_PYTHON=1`, bytes the scan refuses)."""
    record, base = drawn
    record.batch.ClearField("slots")  # a slot per event, as the broker stores them
    record.batch.slots.extend(range(record.batch.count))
    value = stored(record)
    saved = record_scan._native
    record_scan._native = None
    try:
        built_in_python = parse_record(base, value)
    finally:
        record_scan._native = saved
    assert built_in_python.subset_header is None  # serialized when first asked for
    assert built_in_python.header() == head_of(record, base)
    entry = parse_record(base, value)
    assert entry.record == built_in_python.record
    assert entry.slots.tolist() == built_in_python.slots.tolist()
    assert entry.header() == built_in_python.header()
