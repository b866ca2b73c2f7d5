"""`keybus read`: print a topic's events, from every partition unless told.

As Kafka's console consumer and Pulsar's reader do: one stream per partition,
merged as they arrive; each line names the partition and offset. No
subscription: nothing is acknowledged, nothing remembered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import click

from keybus.cli.common import (
    FILTER,
    PARTITION,
    RANGES,
    START,
    Connection,
    checked_name,
    connection_options,
    emit,
    json_option,
    note,
    run,
)
from keybus.cli.progress import progress
from sdk.core.columns import Event
from sdk.core.filters import KeyFilterSpec
from sdk.core.model import HashRange
from sdk.reader import Start
from sdk.topic_reader import TopicReader


def event_line(topic: str, event: Event) -> str:
    """`orders/2 offset 0 scn 1 key 42 slot 53910: hello` (the produce line, plus the event)."""
    value = event.value.decode(errors="replace")
    key = event.key if isinstance(event.key, int) else repr(event.key)
    return f"{topic}/{event.partition} offset {event.offset} scn {event.scn} key {key} " \
           f"slot {event.slot}: {value}"


# --start's old spelling, kept working for scripts (hidden from --help).
start_old_option = click.option("--from", "start_old", type=START, hidden=True)


def chosen_start(start: Start | None, start_old: Start | None, default: Start,
                 partitions: Sequence[int]) -> Start:
    """The start position given (or the default); an offset needs one --partition.

    Raises:
        click.UsageError: both spellings given, or an offset for several partitions.
    """
    if start is not None and start_old is not None:
        raise click.UsageError("give --start only (--from is its old spelling)")
    chosen = start if start is not None else start_old if start_old is not None else default
    if isinstance(chosen, int) and len(partitions) != 1:
        raise click.UsageError(f"--start {chosen} is an offset, a position in one partition; "
                               "add --partition N, or use earliest, latest or scn:N")
    return chosen


def positioned_line(topic: str, next_offsets: dict[int, int | None]) -> str:
    """The note a `--start latest --follow` read gives once every partition's end is
    fixed: what is produced from then on is printed (a script may wait for it)."""
    where = ", ".join(f"{topic}/{p} at offset {o}" for p, o in sorted(next_offsets.items()))
    return f"reading from the end: {where}; waiting for new events"


async def _planned_events(conn: Connection, topic: str, partitions: Sequence[int] | None,
                          start: Start) -> int | None:
    """Events between the start and the end of the read partitions (for the bar)."""
    async with await conn.topic_admin(topic) as admin:
        info = await admin.describe_topic(topic)
    total = 0
    for p in info.partitions:
        if partitions and p.partition not in partitions:
            continue
        if start == "latest":
            continue
        first = start if isinstance(start, int) else p.start_offset
        total += max(p.end_offset - first, 0)
    return total


async def read_events(conn: Connection, topic: str, partitions: Sequence[int] | None,
                      start: Start, follow: bool, hash_ranges: list[HashRange] | None,
                      key_filter: KeyFilterSpec | None, events_max: int | None,
                      retry_timeout_s: float | None, as_json: bool) -> int:
    """Print events until the end (or forever with follow); returns how many."""
    idle_s = conn.timeout_s if follow else None
    total = None if follow else await _planned_events(conn, topic, partitions, start)
    printed = 0
    reader = TopicReader(
        conn.broker, topic, partitions, start=start, follow=follow, hash_ranges=hash_ranges,
        key_filter=key_filter,
        retry_timeout_ms=None if retry_timeout_s is None else int(retry_timeout_s * 1000),
        on_connection_change=lambda connected, message: note(message))
    with progress(f"reading {topic}", total, enabled=None if total else False) as advance:
        async with reader:  # opens it: a "latest" start is fixed on every partition
            if follow and start == "latest":
                note(positioned_line(topic, reader.next_offsets))
            while events_max is None or printed < events_max:
                try:
                    async with asyncio.timeout(idle_s):
                        batch = await reader.__anext__()
                except (StopAsyncIteration, TimeoutError):
                    break
                for event in batch.events()[:None if events_max is None
                                            else events_max - printed]:
                    emit(json.dumps(event.to_dict()) if as_json else event_line(topic, event))
                    printed += 1
                advance(batch.count)
    return printed


@click.command(short_help="Print a topic's events (no subscription).")
@click.argument("topic", callback=checked_name)
@click.option("--partition", "partitions", multiple=True, type=PARTITION,
              help="Read only this partition (repeatable; default: every partition).")
@click.option("--start", type=START, metavar="START",
              help="Where to start: earliest (default), latest, an offset (with one "
                   "--partition: offsets are per partition) or scn:N.")
@start_old_option
@click.option("--follow", "-f", is_flag=True, help="At the end, wait for new events "
                                                   "(Ctrl-C stops).")
@click.option("--ranges", type=RANGES, help="Only these hash ranges of slots 0..65535, "
                                            "e.g. 0-16383,40000-65535.")
@click.option("--filter", "key_filter", type=FILTER,
              help="Broker-side key filter: range:SIZE:[ids] or mod:N:[buckets] "
                   "(see keybus filters explain).")
@click.option("--max", "events_max", type=click.IntRange(1, None),
              help="Stop after this many events.")
@click.option("--retry-timeout", "retry_timeout_s", type=click.FloatRange(0, None),
              metavar="SECONDS", help="How long to retry a lost broker before failing "
                                      "(default 30; with --follow, forever; 0 = forever).")
@connection_options
@json_option
def read(topic: str, partitions: tuple[int, ...], start: Start | None, start_old: Start | None,
         follow: bool, ranges: list[HashRange] | None, key_filter: KeyFilterSpec | None,
         events_max: int | None, retry_timeout_s: float | None, conn: Connection,
         as_json: bool) -> None:
    """Print TOPIC's events, from every partition merged (each line names the
    partition and offset). Reads without a subscription: nothing is acknowledged."""
    chosen = chosen_start(start, start_old, "earliest", partitions)
    run(read_events(conn, topic, partitions or None, chosen, follow, ranges, key_filter,
                    events_max, retry_timeout_s, as_json))
