"""Goal: a partition's window of recent durable records (broker/log/recent.py) only ever
answers with what the log holds from the asked offset on, stays within its bounds, and
says "not here" (None) for anything else, so a dispatcher reads the log instead.

Method: add records as the partition task does, with gaps, oversized records and clears,
and compare every answer of `from_offset` with a model: the contiguous run of records
added since the last break, cut to the bounds.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.recent import RecentRecords


def test_reads_from_the_record_holding_the_offset_to_the_newest() -> None:
    recent = RecentRecords(bytes_max=1 << 20, records_max=10)
    recent.add(0, 3, b"a" * 10)
    recent.add(3, 2, b"b" * 10)
    recent.add(5, 5, b"c" * 10)
    assert (recent.start, recent.end, len(recent)) == (0, 10, 3)
    assert recent.from_offset(0) == [(0, b"a" * 10), (3, b"b" * 10), (5, b"c" * 10)]
    assert recent.from_offset(4) == [(3, b"b" * 10), (5, b"c" * 10)]
    assert recent.from_offset(9) == [(5, b"c" * 10)]
    assert recent.from_offset(10) is None  # nothing newer: the dispatcher waits or reads the log


def test_bounds_drop_the_oldest_and_a_gap_or_a_giant_empties_it() -> None:
    recent = RecentRecords(bytes_max=25, records_max=2)
    recent.add(0, 1, b"x" * 10)
    recent.add(1, 1, b"y" * 10)
    recent.add(2, 1, b"z" * 10)  # 30 bytes, 3 records: the oldest goes
    assert recent.start == 1 and recent.from_offset(0) is None
    recent.add(7, 1, b"w")  # a gap (someone else wrote 3..6): only what follows is known
    assert (recent.start, recent.end) == (7, 8)
    recent.add(8, 1, b"g" * 26)  # larger than the window: nothing is kept
    assert len(recent) == 0 and recent.from_offset(7) is None
    recent.add(9, 1, b"h")  # the next one after the giant is not contiguous with anything held
    assert (recent.start, recent.end) == (9, 10)
    recent.clear()
    assert recent.start is None and recent.end is None


def test_a_window_of_size_zero_keeps_nothing() -> None:
    recent = RecentRecords(bytes_max=0, records_max=64)
    recent.add(0, 1, b"a")
    assert recent.from_offset(0) is None
    none_kept = RecentRecords(bytes_max=1 << 20, records_max=0)
    none_kept.add(0, 1, b"a")
    assert none_kept.from_offset(0) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4), st.integers(1, 12)),
                max_size=30), st.integers(0, 80))
def test_answers_match_a_model(steps: list[tuple[int, int, int]], probe: int) -> None:
    recent = RecentRecords(bytes_max=40, records_max=4)
    model: list[tuple[int, int, bytes]] = []  # (base, count, value): the contiguous run held
    offset = 0
    for gap, count, size in steps:
        offset += gap
        value = bytes([offset % 256]) * size
        recent.add(offset, count, value)
        if gap or size > 40:
            model = []
        if size <= 40:
            model.append((offset, count, value))
        while sum(len(v) for _, _, v in model) > 40 or len(model) > 4:
            model.pop(0)
        offset += count
    held = [(b, v) for b, c, v in model if b + c > probe]
    expected = held if model and model[0][0] <= probe < model[-1][0] + model[-1][1] else None
    assert recent.from_offset(probe) == expected


def test_covering_answers_only_when_the_window_reaches_the_reads_stop() -> None:
    recent = RecentRecords(bytes_max=1 << 20, records_max=10)
    recent.add(10, 5, b"a")
    recent.add(15, 5, b"b")
    assert recent.covering(12, 20) == [(10, b"a"), (15, b"b")]
    assert recent.covering(16, 18) == [(15, b"b")]  # a read may stop inside a record
    assert recent.covering(12, 21) is None  # offset 20 is not held: a read of the log would see it
    assert recent.covering(5, 20) is None
