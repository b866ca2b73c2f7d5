"""Goal: a pass of plain records (every head field the record's own or a column
of 0, 1 or count entries; no ordering keys, schemas or headers) encodes its
winners all at once, and that gives exactly what encoding them record by
record gives: the same entries in the same order, the same tombstone index
entries, the same position; with pauses, one between two slices of
`pause_every` winners.
Method: hypothesis over records with every column shape a broker stores
(sources, opcodes and event times of 0, 1 or count entries, slots of 1 or
count, windows, publish times), folded once as they are and once with the
whole-pass path turned off.
"""

from __future__ import annotations

from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from broker.view import fold as fold_module
from broker.view.fold import fold_records
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb


@st.composite
def plain_records(draw: st.DrawFn) -> list[pb.Record]:
    records, base = [], draw(st.integers(0, 50))
    for _ in range(draw(st.integers(1, 8))):
        n = draw(st.integers(1, 8))
        keys = draw(st.lists(st.integers(-4, 4), min_size=n, max_size=n))

        def column(values: st.SearchStrategy[int], n: int = n) -> list[int]:
            shape = draw(st.sampled_from([0, 1, n]))
            return draw(st.lists(values, min_size=shape, max_size=shape))

        source_shape = draw(st.sampled_from([0, 1, n]))
        batch = pb.EventBatch(
            count=n, key_ints=keys, values=[b"v%d-%d" % (base, i) for i in range(n)],
            sources=draw(st.lists(st.sampled_from(["a", "b"]), min_size=source_shape,
                                  max_size=source_shape)),
            opcodes=column(st.sampled_from([pb.UPSERT, pb.DELETE])),
            event_times_ms=column(st.integers(-5, 10**12)),
            slots=slots_of(keys) if draw(st.booleans()) else [draw(st.integers(0, 65535))])
        records.append(pb.Record(
            topic="t", partition=0, base_offset=base, scn_first=base + draw(st.integers(1, 9)),
            window=draw(st.booleans()), publish_time_ms=draw(st.integers(-3, 10**12)),
            batch=batch))
        base += n + draw(st.integers(0, 3))
    return records


def _by_record(records: list[pb.Record], *pause: object) -> fold_module.Fold:
    with mock.patch.object(fold_module._Columns, "plain", lambda self: False):
        return fold_records(5, 2, records, 0, 0, *pause)  # type: ignore[arg-type]


@given(plain_records())
def test_the_whole_pass_encodes_what_record_by_record_encodes(records: list[pb.Record]) -> None:
    with mock.patch.object(fold_module, "_add_pass_winners",
                           wraps=fold_module._add_pass_winners) as whole_pass:
        whole = fold_records(5, 2, records, 0, 0)
    assert whole_pass.called
    by_record = _by_record(records)
    assert list(whole.entries.items()) == list(by_record.entries.items())
    assert whole.tombstones == by_record.tombstones
    assert (whole.offset_next, whole.scn, whole.events) == \
        (by_record.offset_next, by_record.scn, by_record.events)


@given(plain_records(), st.integers(1, 6))
def test_the_whole_pass_pauses_between_slices_of_winners(records: list[pb.Record],
                                                         every: int) -> None:
    pauses: list[int] = []
    paused = fold_records(5, 2, records, 0, 0, lambda: pauses.append(1), every)
    assert paused == fold_records(5, 2, records, 0, 0)
    winners = len(paused.entries)
    assert len(pauses) == (winners - 1) // every


def test_a_record_with_an_ordering_key_is_not_plain() -> None:
    batch = pb.EventBatch(count=1, key_ints=[1], values=[b"x"], slots=[0], ordering_keys=["o"])
    assert not fold_module._Columns(pb.Record(batch=batch)).plain()
    del batch.ordering_keys[:]
    assert fold_module._Columns(pb.Record(batch=batch)).plain()
