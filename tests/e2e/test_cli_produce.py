"""`keybus produce` with a bad line among good ones: nothing stored, the line named.

Goal: input read whole (a pipe) is checked line by line before anything is
sent, with the checks the SDK and the broker would apply (key, value size,
opcode, headers, partition...), so a bad line stores nothing, is named on one
line of stderr and exits 2, and the fixed input can be sent again without
storing anything twice. What the broker alone refuses after that is said with
the lines that were stored and those that were not (exit 1), and those lines
are exactly what the log holds. Opcodes are taken as `read --json` prints
them. Method: `python -m keybus` as a subprocess against real broker
processes on 127.0.0.1 (one with a smaller event_bytes_max), then `read`
shows what the log holds; each line's key is its line number.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from keybus.cli.produce_lines import line_ranges  # unit-tested in tests/unit/test_cli_produce_lines.py
from tests.e2e.test_cli import keybus, ok, one_line
from tests.support.broker_process import BrokerProcess


def lines(*events: dict[str, object]) -> str:
    return "".join(json.dumps(event) + "\n" for event in events)


def stored_keys(broker: BrokerProcess, topic: str) -> list[int]:
    """The keys the topic holds, in offset order within each partition."""
    return [event["key"] for event in map(json.loads, ok(keybus(
        broker, "read", topic, "--json")).splitlines())]


def test_a_bad_key_on_line_4_stores_nothing_and_the_fixed_input_stores_once(
        shared_broker: BrokerProcess) -> None:
    ok(keybus(shared_broker, "topics", "create", "produce-key"))
    events = [{"key": n, "value": f"v{n}"} for n in (1, 2, 3, 4, 5)]
    events[3]["key"] = 1.5
    result = keybus(shared_broker, "produce", "produce-key", stdin=lines(*events))
    line = one_line(result, 2)
    assert ("stdin line 4: key must be an int in the int64 range or a non-empty str; got 1.5; "
            "nothing was sent") in line
    assert result.stdout == ""
    assert stored_keys(shared_broker, "produce-key") == []
    events[3]["key"] = 4
    ok(keybus(shared_broker, "produce", "produce-key", stdin=lines(*events)))
    assert stored_keys(shared_broker, "produce-key") == [1, 2, 3, 4, 5]


def test_a_value_over_the_limit_on_line_6_of_10_stores_nothing(
        shared_broker: BrokerProcess) -> None:
    ok(keybus(shared_broker, "topics", "create", "produce-big", "--partitions", "2"))
    events = [{"key": n, "value": "x" * 1_100_000 if n == 6 else f"v{n}"} for n in range(1, 11)]
    line = one_line(keybus(shared_broker, "produce", "produce-big", stdin=lines(*events)), 2)
    assert ("stdin line 6: the value is 1,100,000 bytes, over the broker's limit of 1,048,576 "
            "bytes per event (event_bytes_max); nothing was sent") in line
    assert stored_keys(shared_broker, "produce-big") == []


@pytest.mark.parametrize(("event", "text"), [
    ({"key": 7, "value": "a", "headers": "x"}, "headers must be a dict of str to bytes; got str"),
    ({"key": 7, "value": "a", "headers": {"n": 1}, "opcode": "REMOVE"},
     "opcode 'REMOVE' is invalid: use UPSERT (0) or DELETE (1)"),
    ({"key": 7, "value": "a", "opcode": True}, "opcode True is invalid"),
    ({"key": 7, "value": "a", "ordering_key": [1]}, "ordering_key must be a str, an int or None"),
    ({"key": 7, "value": "a", "source": 5}, "source must be a str; got 5"),
    ({"key": 7, "value": "a", "event_time_ms": "soon"},
     "event_time_ms must be an int (milliseconds); got 'soon'"),
    ({"key": 7, "value": "a", "partition": -1}, "partition -1 is invalid: need an int >= 0"),
    ({"key": 7, "value": "a", "partition": 2},
     "partition 2 is invalid: the topic has partitions 0..1"),
    ({"key": 2 ** 63, "value": "a"}, "key 9223372036854775808 is out of the int64 range"),
])
def test_each_field_the_sdk_or_broker_refuses_is_named_with_its_line(
        shared_broker: BrokerProcess, event: dict[str, object], text: str) -> None:
    topic = "produce-fields"
    keybus(shared_broker, "topics", "create", topic, "--partitions", "2")
    good = {"key": 1, "value": "fine"}
    line = one_line(keybus(shared_broker, "produce", topic, stdin=lines(good, event)), 2)
    assert f"stdin line 2: {text}" in line and "nothing was sent" in line, line
    assert stored_keys(shared_broker, topic) == []


def test_opcodes_as_read_prints_them_or_as_numbers(shared_broker: BrokerProcess) -> None:
    ok(keybus(shared_broker, "topics", "create", "produce-opcodes"))
    sent = ok(keybus(shared_broker, "produce", "produce-opcodes", stdin=lines(
        {"key": 1, "value": "a", "opcode": "DELETE"}, {"key": 2, "value": "b", "opcode": "upsert"},
        {"key": 3, "value": "c", "opcode": 1}, {"key": 4, "value": "d", "headers": {"n": 1}})))
    assert len(sent.splitlines()) == 4
    read = [json.loads(row) for row in ok(keybus(shared_broker, "read", "produce-opcodes",
                                                 "--json")).splitlines()]
    assert [row["opcode"] for row in read] == ["DELETE", "UPSERT", "DELETE", "UPSERT"]
    again = ok(keybus(shared_broker, "produce", "produce-opcodes", stdin=lines(
        *({"key": row["key"], "value": row["value"], "opcode": row["opcode"]} for row in read))))
    assert len(again.splitlines()) == 4


@pytest.fixture(scope="module")
def small_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose event_bytes_max (1,000) is below what the CLI assumes (1 MiB)."""
    process = BrokerProcess(Path(tmp_path_factory.mktemp("small")) / "data",
                            "--event-bytes-max", "1000")
    process.start()
    yield process
    process.stop()


def test_what_the_broker_alone_refuses_is_said_with_the_lines_stored(
        small_broker: BrokerProcess) -> None:
    """The CLI cannot know this broker's smaller limit, so line 6 is sent and refused;
    the error names it and says which lines were stored, and those are in the log."""
    ok(keybus(small_broker, "topics", "create", "produce-partial", "--partitions", "2"))
    events = [{"key": n, "value": "x" * 2_000 if n == 6 else f"v{n}"} for n in range(1, 11)]
    result = keybus(small_broker, "produce", "produce-partial", stdin=lines(*events))
    line = one_line(result, 1)
    in_log = sorted(stored_keys(small_broker, "produce-partial"))
    assert 6 not in in_log and len(result.stdout.splitlines()) == len(in_log)
    missing = [n for n in range(1, 11) if n not in in_log]
    assert line.startswith(f"keybus: error: {line_ranges(missing)} not stored: the value of event "), \
        (line, in_log)
    assert "is 2,000 bytes, over the broker's limit of 1,000 bytes per event" in line, line
    assert line.endswith(f"; {line_ranges(in_log)} stored (printed on stdout)"), (line, in_log)


def test_a_larger_limit_is_taken_with_event_bytes_max(small_broker: BrokerProcess,
                                                      shared_broker: BrokerProcess) -> None:
    """--event-bytes-max moves the CLI's check both ways: lower, a line over it is refused
    before sending; higher, a value past the default reaches the broker."""
    ok(keybus(small_broker, "topics", "create", "produce-limit"))
    line = one_line(keybus(small_broker, "produce", "produce-limit", "--event-bytes-max", "1000",
                           stdin=lines({"key": 1, "value": "x" * 2_000})), 2)
    assert "stdin line 1: the value is 2,000 bytes, over the broker's limit of 1,000" in line
    ok(keybus(shared_broker, "topics", "create", "produce-limit"))
    line = one_line(keybus(shared_broker, "produce", "produce-limit", "--event-bytes-max",
                           "3000000", stdin=lines({"key": 1, "value": "x" * 2_000_000})), 1)
    assert line.startswith("keybus: error: line 1 not stored: the value of event 0 is "
                           "2,000,000 bytes"), line
    assert line.endswith("nothing was stored"), line

