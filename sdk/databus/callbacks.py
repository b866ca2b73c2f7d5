"""The callback consumer interface (Databus `DatabusStreamConsumer`) and its base class.

A consumer implements the ten callbacks below; each may be a plain function
or a coroutine function and returns a `CallbackResult` (None counts as
SUCCESS, see results.py). `DatabusConsumerBase` answers SUCCESS to all of
them, so a consumer overrides only what it needs.

Where callbacks run: on the event loop of the client that registered the
consumer. A plain (sync) callback is called directly, with no await around
it: that is the fast path, and it must not block (use an async callback, or
`asyncio.to_thread` inside one, for blocking work). An async callback is
awaited, and its per-call time budget is enforced by cancelling it.

The event passed to `on_event` is a `DbusEvent` view (event.py).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol, runtime_checkable

from sdk.databus.event import DbusEvent, Scn
from sdk.databus.results import SUCCESS, CallbackResult

Result = CallbackResult | bool | None | Awaitable[CallbackResult | bool | None]

# Every callback of a stream consumer, in the order of a consumption's life.
CALLBACK_NAMES = ("on_start_consumption", "on_start_window", "on_start_source", "on_event",
                  "on_end_source", "on_end_window", "on_rollback", "on_checkpoint", "on_error",
                  "on_stop_consumption")


@runtime_checkable
class DatabusConsumer(Protocol):
    """What the client calls. The seed's names are in brackets."""

    def on_start_consumption(self) -> Result:
        """Consumption starts: the reads are open, so a "latest" start is fixed and
        every event stored after this call is delivered. ERROR (or an exception)
        here counts as FATAL."""
        ...

    def on_start_window(self, scn: Scn) -> Result:
        """A consistency window starts [StartDataEventSequence]; `scn.partition` says where."""
        ...

    def on_start_source(self, source: str, schema: str) -> Result:
        """The next events are of `source` [StartSource]."""
        ...

    def on_event(self, event: DbusEvent) -> Result:
        """One data event [DataEvent]."""
        ...

    def on_end_source(self, source: str) -> Result:
        """No more events of `source` in this window [EndSource]."""
        ...

    def on_end_window(self, scn: Scn) -> Result:
        """The window ends [EndDataEventSequence]; CHECKPOINT asks for a checkpoint now."""
        ...

    def on_rollback(self, scn: Scn) -> Result:
        """The window starting at `scn` is delivered again from its first event.
        ERROR here is logged and otherwise ignored (as in Databus)."""
        ...

    def on_checkpoint(self, scn: Scn) -> Result:
        """The client is about to persist a checkpoint at window `scn`: save your state.
        SKIP_CHECKPOINT vetoes this checkpoint; ERROR rolls the window back."""
        ...

    def on_error(self, error: Exception) -> Result:
        """The client met an error (retries exhausted, checkpoint store failure,
        broker unreachable). The result is logged and otherwise ignored."""
        ...

    def on_stop_consumption(self) -> Result:
        """Consumption ends (stop, fatal result or exhausted retries). The result is ignored."""
        ...


class DatabusConsumerBase:
    """A consumer that answers SUCCESS to everything: override what you need.

    Overrides may be `async def`.
    """

    def on_start_consumption(self) -> Result:
        return SUCCESS

    def on_start_window(self, scn: Scn) -> Result:
        return SUCCESS

    def on_start_source(self, source: str, schema: str) -> Result:
        return SUCCESS

    def on_event(self, event: DbusEvent) -> Result:
        return SUCCESS

    def on_end_source(self, source: str) -> Result:
        return SUCCESS

    def on_end_window(self, scn: Scn) -> Result:
        return SUCCESS

    def on_rollback(self, scn: Scn) -> Result:
        return SUCCESS

    def on_checkpoint(self, scn: Scn) -> Result:
        return SUCCESS

    def on_error(self, error: Exception) -> Result:
        return SUCCESS

    def on_stop_consumption(self) -> Result:
        return SUCCESS


def missing_callbacks(consumer: object) -> list[str]:
    """The callback names `consumer` does not provide (empty: it is complete)."""
    return [name for name in CALLBACK_NAMES if not callable(getattr(consumer, name, None))]
