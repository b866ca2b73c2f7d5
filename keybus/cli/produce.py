"""`keybus produce`: JSON lines or one --key/--value event, through the SDK producer."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

import click

from keybus.cli.common import Connection, connection_options, json_option, run
from keybus.cli.progress import progress
from sdk.producer import Producer

EVENT_FIELDS = {"key", "value", "ordering_key", "source", "opcode", "schema", "headers",
                "event_time_ms", "partition"}


def parse_key(text: str) -> int | str:
    """A CLI key: an int when it is one (so range/mod filters see a number), else the text."""
    try:
        return int(text)
    except ValueError:
        return text


def one_event(key: str, value: str, ordering_key: str | None, source: str) -> dict[str, Any]:
    event: dict[str, Any] = {"key": parse_key(key), "value": value.encode()}
    if ordering_key:
        event["ordering_key"] = ordering_key
    if source:
        event["source"] = source
    return event


def event_from_line(line: str, number: int) -> dict[str, Any] | None:
    """One JSON line as an event (None for a blank line).

    Raises:
        click.UsageError: naming the line number and what is wrong (exit 2).
    """
    if not line.strip():
        return None
    try:
        event = json.loads(line)
    except json.JSONDecodeError as e:
        raise click.UsageError(f"stdin line {number} is not JSON: {e.msg}") from None
    if not isinstance(event, dict) or "key" not in event or "value" not in event:
        raise click.UsageError(f'stdin line {number}: need an object with "key" and "value"')
    unknown = set(event) - EVENT_FIELDS
    if unknown:
        raise click.UsageError(f"stdin line {number}: unknown field(s) "
                               f"{', '.join(sorted(unknown))}; allowed: "
                               f"{', '.join(sorted(EVENT_FIELDS))}")
    value = event["value"]
    event["value"] = value.encode() if isinstance(value, str) else json.dumps(value).encode()
    if "headers" in event:
        event["headers"] = {k: str(v).encode() for k, v in event["headers"].items()}
    return event


def events_from_lines(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Parse JSON lines; each is an object with at least "key" and "value".

    Raises:
        click.UsageError: naming the line number and what is wrong (exit 2).
    """
    events = [e for number, line in enumerate(lines, 1)
              if (e := event_from_line(line, number)) is not None]
    if not events:
        raise click.UsageError("no events on stdin; send JSON lines or use --key and --value")
    return events


def stored_line(topic: str, stored: dict[str, int], as_json: bool) -> str:
    return json.dumps({"topic": topic, **stored}) if as_json else \
        f"{topic}/{stored['partition']} offset {stored['offset']} scn {stored['scn']}"


async def produce_events(conn: Connection, topic: str, events: list[dict[str, Any]],
                         partition: int | None, window: bool, scn: int | None,
                         advance: Callable[[int], None]) -> list[dict[str, int]]:
    """Send events (or one window) and return partition/offset/scn of each."""
    async with await Producer.create(conn.broker, topic,
                                      request_timeout_ms=conn.request_timeout_ms) as producer:
        if window:
            target = 0 if partition is None else partition
            for event in events:
                event.pop("partition", None)
            result = await producer.send_window(events, partition=target, scn=scn)
            advance(len(events))
            return [{"partition": target, "offset": o, "scn": result.scn}
                    for o in result.offsets]
        futures = []
        for event in events:
            chosen = event.pop("partition", partition)
            future = await producer.send(event.pop("key"), event.pop("value"),
                                         partition=chosen, **event)
            future.add_done_callback(lambda _: advance(1))
            futures.append(future)
        await producer.flush()
        produced = [await f for f in futures]
    return [{"partition": p.partition, "offset": p.offset, "scn": p.scn} for p in produced]


@click.command(short_help="Produce events to a topic.")
@click.argument("topic")
@click.option("--key", help="Produce one event with this key (an int or a string) instead "
                            "of reading stdin.")
@click.option("--value", help="Value of the one event (UTF-8).")
@click.option("--partition", type=click.IntRange(0, None),
              help="Partition (default: the ordering key's hash slot decides).")
@click.option("--ordering-key", help="Ordering key of the one event (default: its key).")
@click.option("--source", default="", help="Source of the one event, e.g. a table name.")
@click.option("--window", is_flag=True, help="Send all stdin lines as one consistency window "
                                             "(one SCN, stored whole or not at all).")
@click.option("--scn", type=click.IntRange(1, None), help="SCN of the window (with --window).")
@connection_options
@json_option
def produce(topic: str, key: str | None, value: str | None, partition: int | None,
            ordering_key: str | None, source: str, window: bool, scn: int | None,
            conn: Connection, as_json: bool) -> None:
    """Produce events to TOPIC: JSON lines on stdin, one per event
    ({"key": 42, "value": "hello", "ordering_key": "customer-7"}), or one
    event from --key and --value. Prints where each was stored. Typed in a
    terminal, each line is sent as it is entered (Ctrl-D ends)."""
    if scn is not None and not window:
        raise click.UsageError("--scn needs --window")
    if key is not None or value is not None:
        if key is None or value is None:
            raise click.UsageError("--key and --value go together")
        events = [one_event(key, value, ordering_key, source)]
    elif sys.stdin.isatty() and not window:  # typed by hand: send each line as it comes
        from keybus.cli.produce_typed import produce_typed

        run(produce_typed(conn, topic, partition, as_json))
        return
    else:
        events = events_from_lines(sys.stdin)
    with progress(f"producing to {topic}", len(events)) as advance:
        results = run(produce_events(conn, topic, events, partition, window, scn, advance))
    for stored in results:
        click.echo(stored_line(topic, stored, as_json))
