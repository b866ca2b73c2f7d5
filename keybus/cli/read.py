"""`keybus read`: print a partition's events, as a table line or JSON per event."""

from __future__ import annotations

import json
from typing import Any

import click

from sdk.core.filters import KeyFilterSpec
from sdk.core.model import HashRange
from sdk.reader import Reader


def parse_start(text: str) -> Any:
    """earliest | latest | OFFSET | scn:N -> the Reader's start argument."""
    if text in ("earliest", "latest"):
        return text
    if text.startswith("scn:") and text[4:].isdigit():
        return {"scn": int(text[4:])}
    if text.isdigit():
        return int(text)
    raise ValueError(f"--from {text!r} is invalid; allowed: earliest, latest, an offset, or scn:N")


def event_line(event: Any) -> str:
    value = event.value.decode(errors="replace")
    return (f"{event.partition}:{event.offset} scn={event.scn} slot={event.slot} "
            f"key={event.key!r} {value}")


async def read_events(broker: str, topic: str, partition: int, start: Any, follow: bool,
                      hash_ranges: list[HashRange] | None, key_filter: KeyFilterSpec | None,
                      events_max: int | None, as_json: bool) -> None:
    printed = 0
    async with Reader(broker, topic, partition, start=start, follow=follow,
                      hash_ranges=hash_ranges, key_filter=key_filter) as reader:
        async for batch in reader:
            for event in batch.events():
                click.echo(json.dumps(event.to_dict()) if as_json else event_line(event))
                printed += 1
                if events_max is not None and printed >= events_max:
                    return
