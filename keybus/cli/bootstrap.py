"""`keybus bootstrap`: print a partition's snapshot, its catch-up, then follow.

Each event is a line as `keybus read` prints it (or a JSON object with its
phase); each phase opens with a `#` line (or a JSON object with "marker").
"""

from __future__ import annotations

import json
from typing import Any

import click

from keybus.cli.common import broker_option, json_option, run
from keybus.cli.read import event_line
from sdk.bootstrap import PhaseMarker
from sdk.core.filters import KeyFilterSpec
from sdk.core.model import parse_ranges
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


def marker_dict(marker: PhaseMarker) -> dict[str, Any]:
    return {"marker": marker.phase, "snapshot_offset": marker.snapshot_offset,
            "snapshot_scn": marker.snapshot_scn, "target_offset": marker.target_offset,
            "consistent_offset": marker.consistent_offset}


async def print_bootstrap(broker: str, topic: str, partition: int, options: dict[str, Any],
                          events_max: int | None, as_json: bool) -> None:
    printed = 0
    async with Reader(broker, topic, partition, start="bootstrap", **options) as reader:
        async for batch in reader:
            if batch.marker is not None:
                marker = batch.marker
                click.echo(json.dumps(marker_dict(marker)) if as_json
                           else marker_line(topic, partition, marker))
                continue
            for event in batch.events():
                if as_json:
                    click.echo(json.dumps({"phase": batch.phase, **event.to_dict()}))
                else:
                    click.echo(event_line(topic, event))
                printed += 1
                if events_max is not None and printed >= events_max:
                    return


@click.command("bootstrap")
@click.argument("topic")
@click.option("--partition", default=0, show_default=True, type=click.IntRange(0, None))
@click.option("--source", "sources", multiple=True,
              help="Only this source (repeat for several, streamed in that order).")
@click.option("--filter", "filter_text",
              help="Broker-side key filter: range:SIZE:[ids] or mod:N:[buckets].")
@click.option("--ranges", help="Only these hash ranges, e.g. 0-16383,40000-65535.")
@click.option("--follow/--no-follow", default=True, show_default=True,
              help="After the catch-up, follow the live log.")
@click.option("--tombstones/--no-tombstones", default=False, show_default=True,
              help="Print deleted keys' tombstones in the snapshot.")
@click.option("--max", "events_max", type=click.IntRange(1, None), help="Stop after this many events.")
@broker_option
@json_option
def bootstrap(topic: str, partition: int, sources: tuple[str, ...], filter_text: str | None,
              ranges: str | None, follow: bool, tombstones: bool, events_max: int | None,
              broker: str, as_json: bool) -> None:
    """Print TOPIC's current state (the compacted view), then its changes.

    The snapshot holds the latest event of every key; the catch-up, the
    events written while it was read; then, unless --no-follow, new events
    as they come.
    """
    options = {
        "sources": list(sources) or None, "follow": follow, "include_tombstones": tombstones,
        "key_filter": KeyFilterSpec.parse_cli(filter_text) if filter_text else None,
        "hash_ranges": parse_ranges(ranges) if ranges else None,
    }
    run(print_bootstrap(broker, topic, partition, options, events_max, as_json))


def register(cli: click.Group) -> None:
    cli.add_command(bootstrap)
