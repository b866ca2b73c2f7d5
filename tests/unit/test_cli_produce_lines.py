"""`keybus produce`'s input checks and its partial-failure line (keybus/cli/produce_lines.py).

Goal: every field a line can carry is checked as the SDK and the broker check
it, the error names the line, the field and what is allowed; opcodes are
taken by name (as `read --json` prints them) or number; the line for a
partly refused send names exactly the lines stored and not stored. Method:
call the pure functions; line ranges are compared with a plain set model
by hypothesis.
"""

from __future__ import annotations

import json

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from keybus.cli.produce_lines import (
    check_partitions,
    checked_event,
    event_from_line,
    events_from_lines,
    failure_summary,
    line_ranges,
    typed_failure,
)
from sdk.core.pb import keybus_pb2 as pb
from sdk.errors import DeliveryTimeout, InvalidArgument

LIMIT = 1 << 20


def test_a_line_becomes_producer_send_arguments() -> None:
    event = event_from_line('{"key": 1, "value": {"a": 1}, "ordering_key": 7, "source": "t", '
                            '"opcode": "delete", "schema": "s", "headers": {"h": "x", "n": 2},'
                            ' "event_time_ms": 5, "partition": 1}', 3, LIMIT)
    assert event == {"key": 1, "value": b'{"a": 1}', "ordering_key": "7", "source": "t",
                     "opcode": pb.DELETE, "schema": "s", "headers": {"h": b"x", "n": b"2"},
                     "event_time_ms": 5, "partition": 1}
    assert event_from_line("  \n", 4, LIMIT) is None


@pytest.mark.parametrize("opcode", ["UPSERT", "upsert", "Upsert", 0])
def test_upsert_by_name_or_number_is_the_default_left_out(opcode: object) -> None:
    assert checked_event({"key": "k", "value": "v", "opcode": opcode}, LIMIT) == \
        {"key": "k", "value": b"v"}


@pytest.mark.parametrize("opcode", ["DELETE", "Delete", 1])
def test_delete_by_name_or_number(opcode: object) -> None:
    assert checked_event({"key": "k", "value": "v", "opcode": opcode}, LIMIT)["opcode"] == \
        pb.DELETE


@pytest.mark.parametrize(("fields", "text"), [
    ({"key": 1.5}, "key must be an int in the int64 range or a non-empty str; got 1.5"),
    ({"key": ""}, "key must be an int in the int64 range or a non-empty str; got ''"),
    ({"key": True}, "key must be an int in the int64 range or a non-empty str; got True"),
    ({"key": -(2 ** 63) - 1}, "key -9223372036854775809 is out of the int64 range"),
    ({"value": "x" * (LIMIT + 1)}, f"the value is {LIMIT + 1:,} bytes, over the broker's limit"),
    ({"opcode": "REMOVE"}, "opcode 'REMOVE' is invalid: use UPSERT (0) or DELETE (1)"),
    ({"opcode": 2}, "opcode 2 is invalid"),
    ({"headers": "x"}, "headers must be a dict of str to bytes; got str"),
    ({"headers": ["x"]}, "headers must be a dict of str to bytes; got list"),
    ({"ordering_key": {"a": 1}}, "ordering_key must be a str, an int or None"),
    ({"source": ["a"]}, "source must be a str"),
    ({"schema": 3}, "schema must be a str; got 3"),
    ({"event_time_ms": 1.5}, "event_time_ms must be an int (milliseconds); got 1.5"),
    ({"partition": "1"}, "partition '1' is invalid: need an int >= 0"),
    ({"partition": True}, "partition True is invalid"),
])
def test_a_bad_field_is_named_with_its_line(fields: dict[str, object], text: str) -> None:
    line = {"key": 1, "value": "v", **fields}
    with pytest.raises(click.UsageError) as raised:
        event_from_line(json.dumps(line), 9, LIMIT)
    assert raised.value.message.startswith(f"stdin line 9: {text}"), raised.value.message


def test_a_value_at_the_limit_passes_and_the_limit_is_the_callers() -> None:
    assert checked_event({"key": 1, "value": "x" * 10}, 10)["value"] == b"x" * 10
    with pytest.raises(ValueError, match="the value is 11 bytes, over the broker's limit of 10"):
        checked_event({"key": 1, "value": "x" * 11}, 10)


def test_the_first_bad_line_is_named_and_nothing_is_taken() -> None:
    lines = ['{"key": 1, "value": "a"}\n', "\n", '{"key": 1.5, "value": "b"}\n',
             '{"key": "x", "value": "c", "headers": 1}\n']
    with pytest.raises(click.UsageError) as raised:
        events_from_lines(lines, LIMIT)
    assert raised.value.message == ("stdin line 3: key must be an int in the int64 range or a "
                                    "non-empty str; got 1.5; nothing was sent")
    assert [n for n, _ in events_from_lines(lines[:2], LIMIT)] == [1]


def test_partitions_past_the_topic_are_named_before_sending() -> None:
    events = [(1, {"key": 1, "value": b""}), (2, {"key": 2, "value": b"", "partition": 3})]
    check_partitions(events, None, False, 4)
    check_partitions(events, None, True, 2)  # a window goes to one partition: 0
    with pytest.raises(click.UsageError, match=r"^stdin line 2: partition 3 is invalid: the "
                                               r"topic has partitions 0\.\.1; nothing was sent"):
        check_partitions(events, None, False, 2)
    with pytest.raises(click.UsageError, match=r"^--partition: partition 2 is invalid"):
        check_partitions(events[:1], 2, True, 2)


@given(st.sets(st.integers(1, 40), min_size=1))
def test_line_ranges_name_exactly_the_lines(numbers: set[int]) -> None:
    text = line_ranges(sorted(numbers))
    assert text.startswith("line " if len(numbers) == 1 else "lines ")
    named: set[int] = set()
    for part in text.split(" ", 1)[1].split(", "):
        first, _, last = part.partition("-")
        named.update(range(int(first), int(last or first) + 1))
    assert named == numbers


def test_the_failure_line_names_stored_and_missing_lines() -> None:
    refused = InvalidArgument("the value of event 1 is too large")
    stored = {"partition": 0, "offset": 0, "scn": 1}
    outcomes = [(1, stored), (2, stored), (4, refused), (5, refused), (6, stored)]
    assert failure_summary(outcomes) == ("lines 4-5 not stored: the value of event 1 is too "
                                         "large; lines 1-2, 6 stored (printed on stdout)")
    assert failure_summary([(3, refused)]) == \
        "line 3 not stored: the value of event 1 is too large; nothing was stored"
    assert failure_summary([(1, refused)], from_lines=False) == "the value of event 1 is too large"


def test_lines_not_answered_in_time_are_not_called_not_stored() -> None:
    """A delivery timeout says the events "may or may not be stored": the line around it
    must not say "not stored" (or "nothing was stored") of them."""
    timeout = DeliveryTimeout("no answer from the broker within delivery_timeout_ms=4000; "
                              "the events may or may not be stored")
    refused = InvalidArgument("the value of event 1 is too large")
    stored = {"partition": 0, "offset": 0, "scn": 1}
    assert failure_summary([(1, stored), (2, timeout), (3, timeout)]) == (
        "lines 2-3 not confirmed: no answer from the broker within delivery_timeout_ms=4000; "
        "the events may or may not be stored; line 1 stored (printed on stdout)")
    assert failure_summary([(1, timeout)]) == (
        "line 1 not confirmed: no answer from the broker within delivery_timeout_ms=4000; "
        "the events may or may not be stored")
    assert failure_summary([(1, refused), (2, timeout)]) == (
        "line 1 not stored: the value of event 1 is too large; line 2 not confirmed: no answer "
        "from the broker within delivery_timeout_ms=4000; the events may or may not be stored")
    assert typed_failure(timeout) == f"error: {timeout}"
    assert typed_failure(refused) == "error: the value of event 1 is too large (not stored)"
