"""`keybus produce`'s input: JSON lines checked as events, and what to say when some fail.

Pure (no asyncio, grpc or clock). Each line is checked with the SDK's own
field checks (sdk/event_checks.py: key, ordering key, source, opcode, schema,
headers, event time) and its value against the broker's event_bytes_max, so
a line the producer or the broker would refuse is named here, before
anything is sent. Only the partition's upper bound needs the topic, so the
command checks it once connected (`check_partitions`).

The CLI takes opcodes as `read --json` prints them (`"UPSERT"`, `"DELETE"`,
any case) as well as their numbers (0, 1).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import click

from sdk.core.pb import keybus_pb2 as pb
from sdk.errors import DeliveryTimeout
from sdk.event_checks import (
    as_bytes,
    check_key,
    check_ordering_key,
    check_value_size,
    extras_of,
    partition_error,
)

EVENT_FIELDS = {"key", "value", "ordering_key", "source", "opcode", "schema", "headers",
                "event_time_ms", "partition"}
OPCODES = {"UPSERT": pb.UPSERT, "DELETE": pb.DELETE}
# extras_of's column names -> Producer.send's argument names
SEND_ARGUMENTS = {"ordering_keys": "ordering_key", "sources": "source", "opcodes": "opcode",
                  "schemas": "schema", "headers": "headers", "event_times_ms": "event_time_ms"}

# One event as the command keeps it: its line number (1 for --key/--value) and the
# checked fields, as Producer.send takes them, plus "partition" when the line gives one.
LineEvent = tuple[int, dict[str, Any]]


def opcode_of(opcode: Any) -> Any:
    """An opcode name (any case) as its number; anything else is left to the SDK's check."""
    return OPCODES.get(opcode.upper(), opcode) if isinstance(opcode, str) else opcode


def _headers_of(headers: Any) -> Any:
    """JSON header values as text (a number or object as its JSON); a headers field that is
    not an object is left to the SDK's check, which names it."""
    if isinstance(headers, dict):
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in headers.items()}
    return headers


def checked_event(fields: dict[str, Any], event_bytes_max: int) -> dict[str, Any]:
    """One event's fields checked as the SDK and the broker would check them.

    Args:
        fields: "key" and "value" (str, else sent as its JSON text) and any of the
            other EVENT_FIELDS.
        event_bytes_max: the largest value the broker takes.
    Returns:
        Producer.send's arguments (key, value, non-default optional fields) and
        "partition" when given.
    Raises:
        ValueError: naming the field, what was wrong and what is allowed.
    """
    value = fields["value"]
    value = as_bytes(value) if isinstance(value, str) else json.dumps(value).encode()
    event: dict[str, Any] = {"key": check_key(fields["key"]),
                             "value": check_value_size(value, event_bytes_max)}
    ordering_key = fields.get("ordering_key")
    extras = extras_of(None if ordering_key is None else check_ordering_key(ordering_key),
                       fields.get("source", ""), opcode_of(fields.get("opcode", pb.UPSERT)),
                       fields.get("schema", ""), _headers_of(fields.get("headers")),
                       fields.get("event_time_ms", 0))
    event.update((SEND_ARGUMENTS[name], v) for name, v in extras.items())
    partition = fields.get("partition")
    if partition is not None:
        if type(partition) is not int or partition < 0:
            raise ValueError(f"partition {partition!r} is invalid: need an int >= 0")
        event["partition"] = partition
    return event


def event_from_line(line: str, number: int, event_bytes_max: int) -> dict[str, Any] | None:
    """One JSON line as a checked event (None for a blank line).

    Raises:
        click.UsageError: naming the line number and what is wrong (exit 2).
    """
    if not line.strip():
        return None
    try:
        fields = json.loads(line)
    except json.JSONDecodeError as e:
        raise click.UsageError(f"stdin line {number} is not JSON: {e.msg}") from None
    if not isinstance(fields, dict) or "key" not in fields or "value" not in fields:
        raise click.UsageError(f'stdin line {number}: need an object with "key" and "value"')
    unknown = set(fields) - EVENT_FIELDS
    if unknown:
        raise click.UsageError(f"stdin line {number}: unknown field(s) "
                               f"{', '.join(sorted(unknown))}; allowed: "
                               f"{', '.join(sorted(EVENT_FIELDS))}")
    try:
        return checked_event(fields, event_bytes_max)
    except ValueError as e:
        raise click.UsageError(f"stdin line {number}: {e}") from None


def events_from_lines(lines: Iterable[str], event_bytes_max: int) -> list[LineEvent]:
    """Every line checked before any is sent, so a bad line stores nothing.

    Raises:
        click.UsageError: naming the first bad line and what is wrong (exit 2).
    """
    events: list[LineEvent] = []
    for number, line in enumerate(lines, 1):
        try:
            event = event_from_line(line, number, event_bytes_max)
        except click.UsageError as e:
            raise click.UsageError(f"{e.message}; nothing was sent") from None
        if event is not None:
            events.append((number, event))
    if not events:
        raise click.UsageError("no events on stdin; send JSON lines or use --key and --value")
    return events


def check_partitions(events: Sequence[LineEvent], partition: int | None, window: bool,
                     partitions: int) -> None:
    """Every partition named (by --partition or a line) exists in the topic.

    Raises:
        click.UsageError: naming the option or the line (exit 2); nothing was sent.
    """
    if partition is not None and partition >= partitions:
        raise click.UsageError(f"--partition: {partition_error(partition, partitions)}; "
                               "nothing was sent")
    if window:  # a window goes to one partition: --partition, else 0
        return
    for number, event in events:
        chosen = event.get("partition")
        if chosen is not None and chosen >= partitions:
            raise click.UsageError(f"stdin line {number}: {partition_error(chosen, partitions)}"
                                   "; nothing was sent")


def line_ranges(numbers: Sequence[int]) -> str:
    """Ascending line numbers as "line 4" or "lines 1-3, 5"."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
    return f"line {text}" if len(numbers) == 1 else f"lines {text}"


def unanswered(error: Exception) -> bool:
    """Whether a failed send may still have stored its events: the broker did not
    answer within the delivery timeout (its message says "may or may not be stored"),
    so "not stored" would be a claim nobody can make."""
    return isinstance(error, DeliveryTimeout)


def typed_failure(error: Exception) -> str:
    """The line for a typed line whose send failed (the session goes on)."""
    return f"error: {error}" if unanswered(error) else f"error: {error} (not stored)"


def failure_summary(outcomes: Sequence[tuple[int, dict[str, int] | Exception]],
                    from_lines: bool = True) -> str:
    """One line for a send the broker (or the connection) refused in part: which lines
    were not stored and the first error, those not answered in time (they may or may
    not be stored), then which were stored, so the user can send again exactly the
    lines that are missing. (The broker's error names an event by its index in the
    refused request, which the SDK does not map back to a line.)"""
    error = next(o for _, o in outcomes if isinstance(o, Exception))
    if not from_lines:
        return str(error)
    refused = [(n, o) for n, o in outcomes if isinstance(o, Exception) and not unanswered(o)]
    unknown = [(n, o) for n, o in outcomes if isinstance(o, Exception) and unanswered(o)]
    stored = [n for n, o in outcomes if not isinstance(o, Exception)]
    parts = [f"{line_ranges([n for n, _ in failed])} {what}: {failed[0][1]}"
             for failed, what in ((refused, "not stored"), (unknown, "not confirmed"))
             if failed]
    if stored:
        parts.append(f"{line_ranges(stored)} stored (printed on stdout)")
    elif not unknown:
        parts.append("nothing was stored")
    return "; ".join(parts)
