"""`keybus produce` typed in a terminal: each line is sent as it is entered.

As Kafka's console producer: a prompt, one event per line, where it was
stored printed back, a bad line told and skipped (the session goes on),
Ctrl-D to end. Lines are read by a daemon thread so Ctrl-C never waits for
a blocked read.
"""

from __future__ import annotations

import asyncio
import sys
import threading

import click

from keybus.cli.common import Connection, note
from keybus.cli.produce import stored_line
from keybus.cli.produce_lines import event_from_line, typed_failure
from sdk.errors import KeybusError
from sdk.producer import Producer

LINES_QUEUED_MAX = 64  # typed lines waiting to be sent; the reader thread waits past it


def _read_lines(loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]) -> None:
    for line in sys.stdin:
        asyncio.run_coroutine_threadsafe(lines.put(line), loop).result()
    asyncio.run_coroutine_threadsafe(lines.put(None), loop).result()


async def produce_typed(conn: Connection, topic: str, partition: int | None,
                        as_json: bool, event_bytes_max: int) -> None:
    """Send each typed line; returns at end of input."""
    # --timeout bounds each line's whole delivery, retries included, as for piped input
    # (keybus/cli/produce.py): a line never waits the SDK's 120 s default silently.
    async with await Producer.create(conn.broker, topic,
                                      request_timeout_ms=conn.request_timeout_ms,
                                      delivery_timeout_ms=conn.request_timeout_ms) as producer:
        note('one event per line, e.g. {"key": 42, "value": "hello"}; Ctrl-D ends')
        lines: asyncio.Queue[str | None] = asyncio.Queue(LINES_QUEUED_MAX)
        threading.Thread(target=_read_lines, args=(asyncio.get_running_loop(), lines),
                         daemon=True).start()
        number = 0
        while (line := await lines.get()) is not None:
            number += 1
            try:
                event = event_from_line(line, number, event_bytes_max)
            except click.UsageError as e:
                note(f"error: {e.format_message()} (not sent)")
                continue
            if event is None:
                continue
            chosen = event.pop("partition", partition)
            try:
                stored = await (await producer.send(event.pop("key"), event.pop("value"),
                                                    partition=chosen, **event))
            except (KeybusError, ValueError) as e:
                note(typed_failure(e))
                continue
            click.echo(stored_line(topic, {"partition": stored.partition,
                                           "offset": stored.offset, "scn": stored.scn}, as_json))
