"""keybus/cli/scn_start.py: when `databus tail --from-scn N` says events are gone.

Goal: the note names each partition retention cut whose stored log begins
past N (its first SCN greater, or empty with removed SCNs at or past N), in
one line; N at or past the first stored SCN, or a partition retention never
cut (start offset 0), says nothing.
Method: the pure function over hand-made partition starts.
"""

from __future__ import annotations

from keybus.cli.scn_start import PartitionStart, gone_note


def test_a_cut_partition_starting_past_n_is_named() -> None:
    assert gone_note("t", 1, [PartitionStart(0, 2, 3, 4)]) == (
        "--from-scn 1 is before the start of t: events before the start are gone (removed "
        "by retention; partition 0 starts at SCN 3 (offset 2)); starting at the first event "
        "stored")


def test_an_empty_cut_partition_names_what_was_removed() -> None:
    assert gone_note("t", 5, [PartitionStart(1, 9, None, 9)]) == (
        "--from-scn 5 is before the start of t: events before the start are gone (removed "
        "by retention; partition 1 holds none (up to SCN 9 removed)); starting at the first "
        "event stored")


def test_several_partitions_in_one_line_and_only_those_cut_past_n() -> None:
    line = gone_note("t", 4, [PartitionStart(0, 0, 1, 9),     # never cut
                              PartitionStart(1, 3, 4, 9),     # starts at N itself
                              PartitionStart(2, 5, 6, 9),     # past N
                              PartitionStart(3, 2, None, 3),  # empty, removed below N
                              PartitionStart(4, 7, None, 8)])  # empty, removed from N on
    assert line is not None and "\n" not in line
    assert "partition 2 starts at SCN 6 (offset 5); partition 4 holds none" in line
    assert "partition 0" not in line and "partition 1" not in line and "partition 3" not in line


def test_nothing_to_say_is_none() -> None:
    assert gone_note("t", 3, [PartitionStart(0, 2, 3, 4)]) is None
    assert gone_note("t", 0, [PartitionStart(0, 0, 1, 4)]) is None
    assert gone_note("t", 0, []) is None
