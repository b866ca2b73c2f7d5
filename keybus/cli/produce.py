"""`keybus produce`: JSON lines or one --key/--value event, through the SDK producer."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

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


def events_from_lines(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Parse JSON lines; each is an object with at least "key" and "value".

    Raises:
        ValueError: naming the line number and what is wrong.
    """
    events = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"stdin line {number} is not JSON: {e.msg}") from None
        if not isinstance(event, dict) or "key" not in event or "value" not in event:
            raise ValueError(f'stdin line {number}: need an object with "key" and "value"')
        unknown = set(event) - EVENT_FIELDS
        if unknown:
            raise ValueError(f"stdin line {number}: unknown field(s) {', '.join(sorted(unknown))}; "
                             f"allowed: {', '.join(sorted(EVENT_FIELDS))}")
        value = event["value"]
        event["value"] = value.encode() if isinstance(value, str) else json.dumps(value).encode()
        if "headers" in event:
            event["headers"] = {k: str(v).encode() for k, v in event["headers"].items()}
        events.append(event)
    if not events:
        raise ValueError("no events on stdin; send JSON lines or use --key and --value")
    return events


async def produce_events(broker: str, topic: str, events: list[dict[str, Any]],
                         partition: int | None, window: bool, scn: int | None
                         ) -> list[dict[str, int]]:
    """Send events (or one window) and return partition/offset/scn of each."""
    async with await Producer.create(broker, topic) as producer:
        if window:
            target = 0 if partition is None else partition
            for event in events:
                event.pop("partition", None)
            result = await producer.send_window(events, partition=target, scn=scn)
            return [{"partition": target, "offset": o, "scn": result.scn}
                    for o in result.offsets]
        futures = []
        for event in events:
            chosen = event.pop("partition", partition)
            futures.append(await producer.send(event.pop("key"), event.pop("value"),
                                               partition=chosen, **event))
        await producer.flush()
        produced = [await f for f in futures]
    return [{"partition": p.partition, "offset": p.offset, "scn": p.scn} for p in produced]
