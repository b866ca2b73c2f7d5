"""`keybus databus tail` against a real broker process.

Goal: the command prints each window as the seed draws the callback
sequence (sources in the order asked, a source's events together), or one
JSON object per callback with --json; --from-scn and --filter narrow it;
--windows N prints N windows, also when many more are read ahead; bad input
is one line on stderr, exit 2 for usage and 1 for a failed call, never a
traceback.
Method: `python -m keybus ...` as a subprocess, as a user runs it.
"""

from __future__ import annotations

import json

from tests.e2e.test_cli import keybus, ok
from tests.support.broker_process import BrokerProcess

WINDOW_1 = [{"key": 1, "value": "x", "source": "b"}, {"key": 2, "value": "y", "source": "a"},
            {"key": 3, "value": "z", "source": "b"}]
WINDOW_2 = [{"key": 4, "value": "w", "source": "a"}]


def produce_window(broker: BrokerProcess, topic: str, events: list[dict[str, object]]) -> None:
    ok(keybus(broker, "produce", topic, "--window",
              stdin="\n".join(json.dumps(e) for e in events)))


def test_tail_prints_the_callback_sequence(shared_broker: BrokerProcess) -> None:
    ok(keybus(shared_broker, "topics", "create", "cli-databus"))
    produce_window(shared_broker, "cli-databus", WINDOW_1)
    produce_window(shared_broker, "cli-databus", WINDOW_2)
    lines = ok(keybus(shared_broker, "databus", "tail", "cli-databus", "--sources", "a,b",
                      "--windows", "2")).splitlines()
    assert lines == [
        "StartDataEventSequence(1) --> StartSource(a) --> DataEvent(a.2) --> EndSource(a) --> "
        "StartSource(b) --> DataEvent(b.1) --> DataEvent(b.3) --> EndSource(b) --> "
        "EndDataEventSequence(1)",
        "StartDataEventSequence(2) --> StartSource(a) --> DataEvent(a.4) --> EndSource(a) --> "
        "EndDataEventSequence(2)"]
    calls = [json.loads(line) for line in
             ok(keybus(shared_broker, "databus", "tail", "cli-databus", "--from-scn", "2",
                       "--windows", "1", "--json")).splitlines()]
    assert [c["call"] for c in calls] == ["on_start_window", "on_start_source", "on_event",
                                          "on_end_source", "on_end_window"]
    assert calls[2]["key"] == 4 and calls[2]["value"] == "w" and calls[0]["scn"] == 2
    filtered = ok(keybus(shared_broker, "databus", "tail", "cli-databus", "--sources", "b",
                         "--filter", "mod:2:[1]", "--windows", "1"))
    assert filtered.strip() == ("StartDataEventSequence(1) --> StartSource(b) --> "
                                "DataEvent(b.1) --> DataEvent(b.3) --> EndSource(b) --> "
                                "EndDataEventSequence(1)")


def test_tail_bad_input_is_one_line(shared_broker: BrokerProcess) -> None:
    for args, code, says in ((["no-such-topic"], 1, "does not exist"),  # a failed call
                             (["cli-databus", "--filter", "mod:x"], 2, "filter"),  # usage
                             (["cli-databus", "--sources", "a,,b"], 2, "empty name"),
                             (["cli-databus", "--sources", ""], 2, "empty name"),
                             (["cli-databus", "--sources", " "], 2, "empty name"),
                             (["cli-databus", "--sources", "a,a"], 2, "twice")):
        result = keybus(shared_broker, "databus", "tail", *args, "--windows", "1")
        assert result.returncode == code and says in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_tail_stops_at_its_window_count_with_many_read_ahead(
        shared_broker: BrokerProcess) -> None:
    """300 one-event windows fill the read-ahead; --windows 1 prints one of them."""
    ok(keybus(shared_broker, "topics", "create", "cli-databus-many", "--partitions", "1"))
    ok(keybus(shared_broker, "produce", "cli-databus-many", "--partition", "0",
              stdin="\n".join(json.dumps({"key": i, "value": "v"}) for i in range(300))))
    for windows in (1, 3):
        lines = ok(keybus(shared_broker, "databus", "tail", "cli-databus-many",
                          "--windows", str(windows))).splitlines()
        assert len(lines) == windows, lines[:5]
        assert lines[0].startswith("StartDataEventSequence(1) --> ")
