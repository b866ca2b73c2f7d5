"""`keybus databus tail`: print a topic's callback sequence as the Databus seed draws it.

    StartDataEventSequence(12) --> StartSource(a) --> DataEvent(a.1) --> ... -->
    EndSource(a) --> StartSource(b) --> ... --> EndDataEventSequence(12)

one line per window (human), or one JSON object per callback (--json).
Registered on the root group by main.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import click

from keybus.cli.common import (
    FILTER,
    Connection,
    Group,
    checked_name,
    connection_options,
    json_option,
    note,
    run,
)
from keybus.cli.scn_start import note_gone
from sdk import Unavailable
from sdk.core.filters import KeyFilterSpec
from sdk.databus import DatabusClient, DatabusConfig, DatabusConsumerBase, DbusEvent, Scn
from sdk.databus.results import SUCCESS, CallbackResult
from sdk.reader import Start


class TailPrinter(DatabusConsumerBase):
    """Renders callbacks; `emit` receives each finished line (human) or JSON object.

    After `windows_max` windows it asks the registration to stop (`stop`, at
    once: no further window is presented) and sets `done`. An error that ends
    consumption is not printed as a warning: the command prints it once, as
    its error (`is_final` tells it apart from a notice such as an outage).
    Nor is the outage notice (Unavailable): the command says the loss and the
    return on stderr as they happen, as `consume` and `read --follow` do.
    """

    def __init__(self, as_json: bool, windows_max: int | None, emit: Any,
                 done: asyncio.Event) -> None:
        self.as_json = as_json
        self.windows_left = windows_max
        self.emit = emit
        self.done = done
        self.stop: Callable[[], None] = done.set
        self.is_final: Callable[[Exception], bool] = lambda error: False
        self._parts: list[str] = []

    def _say(self, call: str, text: str, **fields: Any) -> None:
        if self.as_json:
            self.emit(json.dumps({"call": call, **fields}, default=str))
        else:
            self._parts.append(text)

    def on_start_window(self, scn: Scn) -> CallbackResult:
        self._parts = []
        self._say("on_start_window", f"StartDataEventSequence({_scn(scn)})", scn=int(scn),
                  partition=scn.partition)
        return SUCCESS

    def on_start_source(self, source: str, schema: str) -> CallbackResult:
        self._say("on_start_source", f"StartSource({source})", source=source, schema=schema)
        return SUCCESS

    def on_event(self, event: DbusEvent) -> CallbackResult:
        self._say("on_event", f"DataEvent({event.source}.{event.key})", **event.to_dict())
        return SUCCESS

    def on_end_source(self, source: str) -> CallbackResult:
        self._say("on_end_source", f"EndSource({source})", source=source)
        return SUCCESS

    def on_end_window(self, scn: Scn) -> CallbackResult:
        self._say("on_end_window", f"EndDataEventSequence({_scn(scn)})", scn=int(scn),
                  partition=scn.partition)
        if not self.as_json:
            self.emit(" --> ".join(self._parts))
        if self.windows_left is not None:
            self.windows_left -= 1
            if self.windows_left <= 0:
                self.stop()
                self.done.set()
        return SUCCESS

    def on_rollback(self, scn: Scn) -> CallbackResult:
        if self.as_json:
            self._say("on_rollback", "", scn=int(scn), partition=scn.partition)
        else:
            self.emit(" --> ".join([*self._parts, f"Rollback({_scn(scn)})"]))
        return SUCCESS

    def on_error(self, error: Exception) -> CallbackResult:
        if self.as_json:
            self._say("on_error", "", error=str(error))
        elif not (self.is_final(error) or isinstance(error, Unavailable)):
            click.echo(f"keybus: warning: {error}", err=True)
        return SUCCESS


def _scn(scn: Scn) -> str:
    return str(int(scn)) if scn.partition == 0 else f"{int(scn)}@p{scn.partition}"


async def tail(broker: str, topic: str, sources: list[str] | None,
               key_filter: KeyFilterSpec | None, start: Start, windows_max: int | None,
               as_json: bool, idle_s: float | None = None) -> None:
    """Print callbacks until --windows, Ctrl-C, or (idle_s) no callback for that long."""
    done = asyncio.Event()
    active = asyncio.Event()

    def emit(line: str) -> None:
        active.set()
        click.echo(line)
    printer = TailPrinter(as_json, windows_max, emit, done)
    # The loss and the return of the broker, once each, on stderr as `consume` says them.
    client = DatabusClient(broker, config=DatabusConfig(checkpoint_windows_n=0),
                           on_connection_change=lambda connected, message: note(message))
    registration = client.register(printer, topic=topic, sources=sources, filter=key_filter,
                                   start=start, name="tail")
    printer.stop = registration.request_stop
    printer.is_final = lambda error: registration.runner.error is error
    # The printer reports errors itself (on_error, then the command's error line) and the
    # connection callback the outage; without this, Python's last-resort handler would
    # print the SDK's own warnings on stderr as well (e.g. "cannot reach broker yet").
    for name in ("keybus.databus", "keybus.connection"):
        logging.getLogger(name).addHandler(logging.NullHandler())
    await client.start()
    waiting = asyncio.ensure_future(registration.wait())
    stopping = asyncio.ensure_future(done.wait())
    try:
        while not (waiting.done() or stopping.done()):
            active.clear()
            woken = asyncio.ensure_future(active.wait())
            finished, _ = await asyncio.wait({waiting, stopping, woken}, timeout=idle_s,
                                             return_when=asyncio.FIRST_COMPLETED)
            woken.cancel()
            if not finished:  # idle for idle_s
                break
    finally:
        stopping.cancel()
        await client.stop()
    await waiting  # raises what ended consumption (e.g. the topic does not exist)


def register(cli: click.Group) -> None:
    """Add `keybus databus ...` to the root group."""

    @cli.group(cls=Group)
    def databus() -> None:
        """Databus-style callback consumers: consistency windows, sources, SCNs."""

    @databus.command("tail")
    @click.argument("topic", callback=checked_name)
    @click.option("--sources", help="Sources to present, in this order (comma-separated; "
                                    "default every source).")
    @click.option("--filter", "key_filter", type=FILTER,
                  help="Broker-side key filter: range:SIZE:[ids] or mod:N:[buckets] "
                       "(see keybus filters explain).")
    @click.option("--from-scn", type=click.IntRange(0, None),
                  help="Start at the first window with SCN >= N (default: the earliest).")
    @click.option("--windows", "windows_max", type=click.IntRange(1, None),
                  help="Stop after this many windows (default: follow until Ctrl-C).")
    @connection_options
    @json_option
    def databus_tail(topic: str, sources: str | None, key_filter: KeyFilterSpec | None,
                     from_scn: int | None, windows_max: int | None, conn: Connection,
                     as_json: bool) -> None:
        """Print TOPIC's windows as the callback sequence a consumer sees."""
        # `--sources ''` is a list with an empty name, refused as in a,,b: it used to
        # count as no --sources at all and print every source
        names = [s.strip() for s in sources.split(",")] if sources is not None else None
        if names is not None and not all(names):
            raise click.UsageError(f"--sources {sources!r} has an empty name; give names "
                                   "like a,b")
        if names is not None and len(set(names)) != len(names):
            raise click.UsageError(f"--sources {sources!r} names a source twice; give "
                                   "distinct names like a,b")
        start: Start = {"scn": from_scn} if from_scn is not None else "earliest"
        broker = conn.one_broker  # a Databus client talks to one: a list is bad usage (exit 2)

        async def noted_tail() -> None:
            if from_scn is not None:  # events from it that retention removed: say so first
                await note_gone(conn, topic, from_scn)
            await tail(broker, topic, names, key_filter, start, windows_max, as_json,
                       conn.timeout_s)
        run(noted_tail())
