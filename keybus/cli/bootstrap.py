"""`keybus bootstrap`: print each partition's snapshot, its catch-up, then follow.

Each event is a line as `keybus read` prints it (or a JSON object with its
phase); each phase opens with a `#` line (or a JSON object with "marker").
Every partition unless --partition narrows, bootstrapped side by side: the
lines of different partitions interleave, each naming its partition.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import click

from keybus.cli.common import (
    FILTER,
    PARTITION,
    RANGES,
    Connection,
    checked_name,
    connection_options,
    json_option,
    note,
    run,
)
from keybus.cli.read import event_line
from sdk.bootstrap import PhaseMarker
from sdk.core.filters import KeyFilterSpec
from sdk.core.model import HashRange
from sdk.reader import Reader


def marker_line(topic: str, partition: int, marker: PhaseMarker) -> str:
    where = f"{topic}/{partition}"
    if marker.phase == "snapshot":
        return (f"# snapshot of {where}: the latest event per key below offset "
                f"{marker.snapshot_offset} (scn {marker.snapshot_scn})")
    if marker.phase == "catchup":
        return (f"# catch-up of {where} from offset {marker.snapshot_offset} to "
                f"{marker.target_offset} (consistent from offset {marker.consistent_offset})")
    return f"# online: following {where} from offset {marker.target_offset}"


def marker_dict(partition: int, marker: PhaseMarker) -> dict[str, Any]:
    return {"marker": marker.phase, "partition": partition,
            "snapshot_offset": marker.snapshot_offset, "snapshot_scn": marker.snapshot_scn,
            "target_offset": marker.target_offset, "consistent_offset": marker.consistent_offset}


class _Outage:
    """The partitions' readers see one broker: its loss is said once (the first
    reader to lose it) and its return once (the first reader back), as `read
    --follow` and `consume` say them over every partition, not once per partition."""

    def __init__(self) -> None:
        self.lost = False

    def report(self, connected: bool, message: str) -> None:
        if connected == self.lost:  # a change: lost, or back after a loss
            self.lost = not connected
            note(message)


class _Printed:
    """Events printed over every partition, against --max."""

    def __init__(self, events_max: int | None) -> None:
        self.n = 0
        self.events_max = events_max
        self.outage = _Outage()  # the connection reports of every partition's reader
        self.enough = asyncio.Event()

    def add(self) -> None:
        self.n += 1
        if self.events_max is not None and self.n >= self.events_max:
            self.enough.set()


async def print_partition(conn: Connection, topic: str, partition: int, options: dict[str, Any],
                          printed: _Printed, as_json: bool) -> None:
    """One partition's bootstrap; with --follow and --timeout, ends after that long idle.

    A broker whose bootstrap slots are all taken (bootstrap_streams_max) is
    waited out by the Reader, for as long as it takes (Ctrl-C stops); its
    report is a note on stderr, and the wait is not idle time: --timeout
    starts again once the partition has its slot.
    """
    idle_s = conn.timeout_s if options["follow"] else None
    idle: asyncio.Timeout | None = None

    def slot_wait(waiting: bool, message: str) -> None:
        note(message)
        if waiting and idle is not None:
            idle.reschedule(None)

    async with Reader(conn.broker, topic, partition, start="bootstrap",
                      on_connection_change=printed.outage.report, on_slot_wait=slot_wait,
                      slot_wait_timeout_ms=0, **options) as reader:
        while not printed.enough.is_set():
            try:
                async with asyncio.timeout(idle_s) as idle:
                    batch = await reader.__anext__()
            except (StopAsyncIteration, TimeoutError):
                return
            if batch.marker is None:
                for event in batch.events():
                    click.echo(json.dumps({"phase": batch.phase, **event.to_dict()}) if as_json
                               else event_line(topic, event))
                    printed.add()
                    if printed.enough.is_set():
                        return
            else:
                click.echo(json.dumps(marker_dict(partition, batch.marker)) if as_json
                           else marker_line(topic, partition, batch.marker))


async def print_bootstrap(conn: Connection, topic: str, partitions: Sequence[int],
                          options: dict[str, Any], events_max: int | None,
                          as_json: bool) -> None:
    """Every chosen partition (default all) side by side, until each ends or --max."""
    if not partitions:
        async with await conn.topic_admin(topic) as admin:
            info = await admin.describe_topic(topic)
        partitions = [p.partition for p in info.partitions]
    printed = _Printed(events_max)
    tasks = [asyncio.create_task(print_partition(conn, topic, p, options, printed, as_json))
             for p in partitions]
    try:
        for finished in asyncio.as_completed(tasks):
            await finished  # a partition's failure ends the command
            if printed.enough.is_set():
                return
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@click.command("bootstrap")
@click.argument("topic", callback=checked_name)
@click.option("--partition", "partitions", multiple=True, type=PARTITION,
              help="Bootstrap only this partition (repeatable; default: every partition).")
@click.option("--source", "sources", multiple=True,
              help="Only this source (repeat for several, streamed in that order).")
@click.option("--filter", "key_filter", type=FILTER,
              help="Broker-side key filter: range:SIZE:[ids] or mod:N:[buckets] "
                   "(see keybus filters explain).")
@click.option("--ranges", type=RANGES, help="Only these hash ranges of slots 0..65535, "
                                            "e.g. 0-16383,40000-65535.")
@click.option("--follow/--no-follow", default=True, show_default=True,
              help="After the catch-up, follow the live log (Ctrl-C stops).")
@click.option("--tombstones/--no-tombstones", default=False, show_default=True,
              help="Print deleted keys' tombstones in the snapshot.")
@click.option("--max", "events_max", type=click.IntRange(1, None),
              help="Stop after this many events.")
@connection_options
@json_option
def bootstrap(topic: str, partitions: tuple[int, ...], sources: tuple[str, ...],
              key_filter: KeyFilterSpec | None, ranges: list[HashRange] | None, follow: bool,
              tombstones: bool, events_max: int | None, conn: Connection,
              as_json: bool) -> None:
    """Print TOPIC's current state (the compacted view), then its changes.

    The snapshot holds the latest event of every key; the catch-up, the
    events written while it was read; then, unless --no-follow, new events
    as they come (with --timeout, until none came for that long).
    """
    # a bootstrap reads from one broker (the SDK's bootstrap Reader takes one address):
    # a list is bad usage (exit 2), said before any connection
    conn = Connection(conn.one_broker, conn.timeout_s)
    options = {"sources": list(sources) or None, "follow": follow,
               "include_tombstones": tombstones, "key_filter": key_filter,
               "hash_ranges": ranges}
    run(print_bootstrap(conn, topic, sorted(set(partitions)), options, events_max, as_json))


def register(cli: click.Group) -> None:
    cli.add_command(bootstrap)
