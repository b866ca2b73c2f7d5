"""Goal: `python -m benchmarks core-path` drives the real dispatch core as a dispatcher
following the tail does, checks that every event reaches one consumer once and in
order, and reports CPU per commit and a call count that is the same on every run.

Method: short runs of the real core, read and delivery code in this process; one run
with the core's sends doubled, which the checks must catch.
"""

from __future__ import annotations

import argparse

import pytest

from benchmarks import core_path


def options() -> argparse.Namespace:
    return core_path.parse_args(["--commits", "60", "--repeats", "1"])


def test_every_event_reaches_one_consumer_once_and_the_acks_free_the_holdings() -> None:
    path = core_path.CorePath(events=12, consumers=4, ack_every=5)
    for value in path.values(50):
        path.commit(value)
    path.check()
    assert path.delivered == 600 and path.commits == 50
    assert sum(m.holding.count for m in path.core.members.values()) == 0  # 50 = 10 x 5
    assert path.core.mark_delete() == 600


def test_a_double_send_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    path = core_path.CorePath(events=4, consumers=2, ack_every=10)
    real = path.core.take_sends

    def doubled() -> list:
        sends = real()
        return sends + sends[:1]

    monkeypatch.setattr(path.core, "take_sends", doubled)
    with pytest.raises(AssertionError, match="twice"):
        for value in path.values(5):
            path.commit(value)


def test_the_figures_and_a_call_count_that_does_not_move() -> None:
    first = core_path.measure(options())
    second = core_path.measure(options())
    assert first["calls_per_commit"] == second["calls_per_commit"] > 50
    assert first["us_per_commit"] > 0 and len(first["top"]) == core_path.TOP_FUNCTIONS
    assert any("delivery.py" in row["function"] for row in first["top"])
    text = core_path.render(first)
    assert text.startswith("12 events a commit to 4 consumers:")
    assert "| function | calls per commit | share of own time |" in text


def test_bad_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        core_path.parse_args(["--events", "0"])
    assert "--events must be at least 1" in capsys.readouterr().err
