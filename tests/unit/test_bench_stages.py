"""Goal: the stage split joins the broker's notes and the clients' stamps right: every
stage of a known event comes out, in order, and they add up to its whole latency.

Method: hand-made notes for two events in two groups (one delivered in a delivery that
spans another consumer's offset), with known answers.
"""

from __future__ import annotations

from benchmarks.stage_join import STAGES, Arrival, round_trips_ns, stage_rows, wal_fsyncs_ns

MS = 1_000_000


def test_each_event_gets_every_stage_and_they_add_up() -> None:
    notes = [
        ("decide", 0, 1, 2 * MS, 3 * MS), ("write", 0, 1, 3 * MS),
        ("synced", 0, 1, 5 * MS, 4 * MS),  # its fsync began at 4 ms on the worker thread
        ("publish", 1, 6 * MS), ("round", 7 * MS), ("deliver", 0, 0, 8 * MS),
        ("decide", 1, 1, 12 * MS, 13 * MS), ("write", 1, 2, 13 * MS),
        ("synced", 1, 2, 15 * MS), ("publish", 2, 16 * MS), ("round", 17 * MS),
        ("deliver", 0, 1, 7 * MS),  # queued before offset 1 was published: not its delivery
        ("deliver", 1, 1, 18 * MS),
    ]
    arrivals = [Arrival(0, 0, 10 * MS), Arrival(1, 10 * MS, 20 * MS)]
    left = {0: 1 * MS, 10 * MS: 11 * MS}
    rows = stage_rows(notes, arrivals, left)
    assert len(rows) == 2 and all(len(row) == len(STAGES) for row in rows)
    assert [v // MS for v in rows[0]] == [1, 1, 1, 2, 1, 1, 1, 2]
    assert [v // MS for v in rows[1]] == [1, 1, 1, 2, 1, 1, 1, 2]
    assert sum(rows[1]) == 10 * MS


def test_an_event_missing_from_the_notes_is_left_out() -> None:
    notes = [("decide", 0, 1, 2 * MS, 3 * MS), ("synced", 0, 1, 5 * MS), ("publish", 1, 6 * MS)]
    assert stage_rows(notes, [Arrival(0, 0, 10 * MS)], {0: MS}) == []  # never delivered


def test_the_wal_fsyncs_own_lengths_come_from_the_synced_notes() -> None:
    notes = [("synced", 0, 1, 5 * MS, 4 * MS), ("synced", 1, 9, 40 * MS, 10 * MS),
             ("synced", 9, 10, 50 * MS), ("write", 0, 1, 3 * MS)]  # an old note: no start
    assert wal_fsyncs_ns(notes) == [1 * MS, 30 * MS]


def test_the_producers_round_trip_is_from_a_batch_leaving_to_its_answer() -> None:
    left = {0: 1 * MS, 1 * MS: 3 * MS, 2 * MS: 3 * MS, 3 * MS: 6 * MS}
    answered = {0: 2 * MS, 1 * MS: 5 * MS, 2 * MS: 5 * MS}  # the last one never answered
    assert round_trips_ns(left, answered) == [1 * MS, 2 * MS, 2 * MS]
