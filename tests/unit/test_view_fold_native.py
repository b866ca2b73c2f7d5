"""A view pass's fold of plain records in C (broker/view/_view_fold.c).

Goal: where the C fold answers, it gives what `fold_records` gives for the
parsed records: the same entries in the same order, tombstone index entries,
position and event count; records outside its case (more sources, string or
ordering keys, schemas, headers, record offsets, non-ASCII text) and bytes
protobuf would not write give None, and `fold_bodies` then folds the parsed
records in Python; damaged bytes never make it answer what the parse would not.

Method: hypothesis over the plain records of the whole-pass test (every column
shape a broker stores), records outside the case, and mutated bytes. Skipped
only where the module was not built (an install without a C compiler); CI
builds it.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.view import codec, fold_native
from broker.view.fold import Fold, fold_records
from broker.view.fold_native import fold_bodies
from sdk.core.pb import keybus_pb2 as pb
from tests.unit.test_subscription_subset_wire import damage
from tests.unit.test_view_fold_pass import plain_records

built = pytest.mark.skipif(not fold_native.NATIVE, reason="the native view fold was not built")
TOPIC_ID, PARTITION = 5, 2


def c_fold(bodies: list[bytes]) -> Any:
    assert fold_native._native is not None
    return fold_native._native.fold(bodies, codec.entries_prefix(TOPIC_ID, PARTITION),
                                    codec.tombstones_prefix(TOPIC_ID, PARTITION))


def python_fold(records: list[pb.Record], offset_next: int = 0, scn: int = 0) -> Fold:
    return fold_records(TOPIC_ID, PARTITION, records, offset_next, scn)


def one_source(records: list[pb.Record]) -> bool:
    return all(len(r.batch.sources) <= 1 for r in records)


@built
@settings(max_examples=400, deadline=None)
@given(plain_records(), st.integers(0, 100), st.integers(0, 100))
def test_the_c_fold_gives_what_the_python_fold_gives(records: list[pb.Record], offset_next: int,
                                                      scn: int) -> None:
    bodies = [r.SerializeToString() for r in records]
    if one_source(records):
        assert c_fold(bodies) is not None  # the common case is folded in C
    else:
        assert c_fold(bodies) is None
    assert fold_bodies(TOPIC_ID, PARTITION, bodies, offset_next, scn) == \
        python_fold(records, offset_next, scn)


@built
def test_a_pass_of_records_without_events_keeps_the_position() -> None:
    empty = pb.Record(topic="t", base_offset=7, scn_first=9).SerializeToString()
    assert c_fold([empty])[3] == 0
    assert fold_bodies(TOPIC_ID, PARTITION, [empty], 7, 3) == Fold(offset_next=7, scn=3)
    assert fold_bodies(TOPIC_ID, PARTITION, [], 7, 3) == Fold(offset_next=7, scn=3)


def _plain(**batch: Any) -> pb.Record:
    columns: dict[str, Any] = {"count": 2, "key_ints": [1, 2], "values": [b"a", b"b"],
                               "slots": [3]}
    columns.update(batch)
    return pb.Record(topic="t", base_offset=10, scn_first=11, publish_time_ms=5,
                     batch=pb.EventBatch(**columns))


OUTSIDE = {
    "per-event sources": _plain(sources=["a", "b"]),
    "string keys": _plain(key_ints=[], key_strings=["x", "y"]),
    "ordering keys": _plain(ordering_keys=["o"]),
    "schemas": _plain(schemas=["s"]),
    "headers": _plain(headers=[pb.Headers()]),
    "no slot per event": _plain(slots=[]),
    "record offsets": pb.Record(topic="t", offsets=[1, 2], batch=_plain().batch),
    "record scns": pb.Record(topic="t", scns=[1, 2], batch=_plain().batch),
    "non-ASCII source": _plain(sources=["é"]),
    "non-ASCII topic": pb.Record(topic="é", batch=_plain().batch),
}


@built
@pytest.mark.parametrize("name", sorted(OUTSIDE))
def test_records_outside_the_common_case_go_to_python(name: str) -> None:
    record = OUTSIDE[name]
    bodies = [_plain().SerializeToString(), record.SerializeToString()]
    assert c_fold(bodies) is None
    assert fold_bodies(TOPIC_ID, PARTITION, bodies, 0, 0) == \
        python_fold([_plain(), record])


@built
def test_bytes_protobuf_would_not_write_go_to_python() -> None:
    good = _plain().SerializeToString()
    batch = _plain().batch.SerializeToString()
    for body in (
        good + good,  # the batch twice: protobuf merges it
        b"\x00\x01" + good,  # field 0
        good[:-1],  # cut short
        b"\x38\x01" + good,  # the batch's field as a number
        b"\x3a\x04\x00\x01\x08\x00",  # a field 0 in a batch of no events
    ):
        assert c_fold([body]) is None, body
    assert c_fold([b"\x3a" + bytes([len(batch)]) + batch]) is not None


@built
@settings(max_examples=400, deadline=None)
@given(plain_records(), st.data())
def test_damaged_bytes_never_fold_what_the_parse_refuses(records: list[pb.Record],
                                                         data: st.DataObject) -> None:
    bodies = [r.SerializeToString() for r in records]
    at = data.draw(st.integers(0, len(bodies) - 1))
    bodies[at] = damage(bodies[at], data)
    found = c_fold(bodies)
    if found is None:
        return
    try:
        parsed = [pb.Record.FromString(b) for b in bodies]
    except DecodeError:
        pytest.fail("the C fold folded bytes protobuf refuses")
    assert fold_bodies(TOPIC_ID, PARTITION, bodies, 0, 0) == python_fold(parsed)


def test_without_the_module_the_records_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fold_native, "_native", None)
    records = [_plain(), _plain(key_ints=[2, 3])]
    bodies = [r.SerializeToString() for r in records]
    assert fold_bodies(TOPIC_ID, PARTITION, bodies, 0, 0) == python_fold(records)
