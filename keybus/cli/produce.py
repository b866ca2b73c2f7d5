"""`keybus produce`: JSON lines or one --key/--value event, through the SDK producer.

Input read whole (a file or a pipe) is checked line by line before anything is
sent (produce_lines.py): a bad line is named, nothing is stored (exit 2) and
the fixed input can be sent again without storing anything twice. What only
the broker can refuse after that (a smaller limit of its own, permissions, a
broker that goes away) is said in one line naming the lines that were stored,
those that were not and those not answered in time, which may or may not be
(exit 1). Typed in a terminal, each line is sent as
it is entered (produce_typed.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click

from keybus.cli.common import (
    PARTITION,
    Connection,
    checked_name,
    connection_options,
    fail,
    json_option,
    run,
)
from keybus.cli.produce_lines import (
    LineEvent,
    check_partitions,
    checked_event,
    events_from_lines,
    failure_summary,
    unanswered,
)
from keybus.cli.producer_outage import producer_outages_said
from keybus.cli.progress import progress
from sdk.core.columns import EVENT_BYTES_MAX_DEFAULT, SCN_SUPPLIED_MAX
from sdk.errors import KeybusError
from sdk.producer import Producer
from sdk.producer_futures import EventFuture

Outcome = dict[str, int] | Exception  # where an event was stored, or why it was not


def parse_key(text: str) -> int | str:
    """A CLI key: an int when it is one (so range/mod filters see a number), else the text."""
    try:
        return int(text)
    except ValueError:
        return text


def one_event(key: str, value: str, ordering_key: str | None, source: str,
              event_bytes_max: int) -> dict[str, Any]:
    """The --key/--value event, checked as a line would be.

    Raises:
        click.UsageError: naming the field and what is allowed (exit 2).
    """
    fields: dict[str, Any] = {"key": parse_key(key), "value": value, "source": source}
    if ordering_key:
        fields["ordering_key"] = ordering_key
    try:
        return checked_event(fields, event_bytes_max)
    except ValueError as e:
        raise click.UsageError(str(e)) from None


def stored_line(topic: str, stored: dict[str, int], as_json: bool) -> str:
    return json.dumps({"topic": topic, **stored}) if as_json else \
        f"{topic}/{stored['partition']} offset {stored['offset']} scn {stored['scn']}"


async def produce_events(conn: Connection, topic: str, events: list[LineEvent],
                         partition: int | None, window: bool, scn: int | None,
                         advance: Callable[[int], None]) -> list[Outcome]:
    """Send checked events (or one window); return, per event, where it was stored
    or why not.

    Raises:
        click.UsageError: a partition the topic does not have; nothing was sent.
    """
    # --timeout bounds the whole delivery, retries included (a refused produce, e.g. a
    # leader short of followers, is retried): never the SDK's 120 s default silently.
    async with await Producer.create(conn.broker, topic,
                                      request_timeout_ms=conn.request_timeout_ms,
                                      delivery_timeout_ms=conn.request_timeout_ms) as producer:
        check_partitions(events, partition, window, producer.partitions)
        if window:
            return await _send_window(producer, events, partition or 0, scn, advance)
        futures: list[EventFuture] = []
        refused: Exception | None = None
        for _, event in events:
            fields = dict(event)
            chosen = fields.pop("partition", partition)
            try:
                future = await producer.send(fields.pop("key"), fields.pop("value"),
                                             partition=chosen, **fields)
            except (KeybusError, ValueError) as e:  # e.g. closed: this line and the rest wait
                refused = e
                break
            future.add_done_callback(lambda _: advance(1))
            futures.append(future)
        await producer.flush()
        outcomes = [await _outcome(f) for f in futures]
    return outcomes + [refused] * (len(events) - len(outcomes)) if refused else outcomes


async def _outcome(future: EventFuture) -> Outcome:
    try:
        stored = await future
    except (KeybusError, ValueError) as e:
        return e
    return {"partition": stored.partition, "offset": stored.offset, "scn": stored.scn}


async def _send_window(producer: Producer, events: list[LineEvent], partition: int,
                       scn: int | None, advance: Callable[[int], None]) -> list[Outcome]:
    """One window: stored whole or not at all, so a failure is one error for all."""
    fields = [{k: v for k, v in event.items() if k != "partition"} for _, event in events]
    try:
        result = await producer.send_window(fields, partition=partition, scn=scn)
    except (KeybusError, ValueError) as e:
        stored = "" if unanswered(e) else "; nothing was stored"  # else it says "may or may not"
        raise click.ClickException(  # exit 1: a failed call
            f"{e}{stored} (a window is stored whole or not at all)") from None
    advance(len(events))
    return [{"partition": partition, "offset": o, "scn": result.scn} for o in result.offsets]


@click.command(short_help="Produce events to a topic.")
@click.argument("topic", callback=checked_name)
@click.option("--key", help="Produce one event with this key (an int or a string) instead "
                            "of reading stdin.")
@click.option("--value", help="Value of the one event (UTF-8).")
@click.option("--partition", type=PARTITION,
              help="Partition (default: the ordering key's hash slot decides).")
@click.option("--ordering-key", help="Ordering key of the one event (default: its key).")
@click.option("--source", default="", help="Source of the one event, e.g. a table name.")
@click.option("--window", is_flag=True, help="Send all stdin lines as one consistency window "
                                             "(one SCN, stored whole or not at all).")
@click.option("--scn", type=click.IntRange(1, SCN_SUPPLIED_MAX),
              help="SCN of the window (with --window).")
@click.option("--event-bytes-max", type=click.IntRange(1, None), default=EVENT_BYTES_MAX_DEFAULT,
              show_default=True, metavar="BYTES",
              help="Largest value the broker takes (its event_bytes_max); a line with a larger "
                   "one is refused before anything is sent. Raise it for a broker that "
                   "allows more.")
@connection_options
@json_option
def produce(topic: str, key: str | None, value: str | None, partition: int | None,
            ordering_key: str | None, source: str, window: bool, scn: int | None,
            event_bytes_max: int, conn: Connection, as_json: bool) -> None:
    """Produce events to TOPIC: JSON lines on stdin, one per event
    ({"key": 42, "value": "hello", "ordering_key": "customer-7"}; also "source",
    "opcode" (UPSERT or DELETE), "schema", "headers", "event_time_ms",
    "partition"), or one event from --key and --value. Prints where each was
    stored. Every line is checked before any is sent: a bad line is named and
    nothing is stored. Typed in a terminal, each line is sent as it is entered
    (Ctrl-D ends)."""
    if scn is not None and not window:
        raise click.UsageError("--scn needs --window")
    if key is not None or value is not None:
        if key is None or value is None:
            raise click.UsageError("--key and --value go together")
        events = [(1, one_event(key, value, ordering_key, source, event_bytes_max))]
    elif sys.stdin.isatty() and not window:  # typed by hand: send each line as it comes
        from keybus.cli.produce_typed import produce_typed

        with producer_outages_said():
            run(produce_typed(conn, topic, partition, as_json, event_bytes_max))
        return
    else:
        events = events_from_lines(sys.stdin, event_bytes_max)
    with progress(f"producing to {topic}", len(events)) as advance, producer_outages_said():
        outcomes = run(produce_events(conn, topic, events, partition, window, scn, advance))
    for outcome in outcomes:
        if not isinstance(outcome, Exception):
            click.echo(stored_line(topic, outcome, as_json))
    if any(isinstance(outcome, Exception) for outcome in outcomes):
        fail(failure_summary([(n, o) for (n, _), o in zip(events, outcomes, strict=True)],
                             from_lines=key is None))
