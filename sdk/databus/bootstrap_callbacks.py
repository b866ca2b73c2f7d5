"""The bootstrap callbacks (Databus `DatabusBootstrapConsumer`) and the combined consumer.

A registration made with `bootstrap=True` switches a partition to bootstrap
when its checkpoint is older than what the log still holds: the partition's
compacted view arrives as a snapshot (the latest event per key, deletes as
DELETE events), then the catch-up from the log, through these callbacks;
then the stream continues with the ordinary ones (callbacks.py). See
docs/bootstrap.md.

    on_start_bootstrap()                a partition starts bootstrapping
      on_start_bootstrap_sequence(scn)    a run of snapshot rows (one source), or a
        on_start_bootstrap_source(...)    catch-up window; scn.partition says where
          on_bootstrap_event(event)
        on_end_bootstrap_source(source)
      on_end_bootstrap_sequence(scn)
      on_bootstrap_checkpoint(scn)        before a checkpoint of the bootstrap's position
      on_bootstrap_rollback(scn)          a sequence is delivered again
    on_end_bootstrap()                  caught up: ordinary windows follow

Results and where callbacks run are as for the stream callbacks. ERROR (or
an exception) in on_start_bootstrap or on_end_bootstrap counts as FATAL, as
in on_start_consumption. Errors go to on_error.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sdk.databus.callbacks import CALLBACK_NAMES, DatabusConsumer, DatabusConsumerBase, Result
from sdk.databus.event import DbusEvent, Scn
from sdk.databus.results import SUCCESS

BOOTSTRAP_CALLBACK_NAMES = (
    "on_start_bootstrap", "on_start_bootstrap_sequence", "on_start_bootstrap_source",
    "on_bootstrap_event", "on_end_bootstrap_source", "on_end_bootstrap_sequence",
    "on_bootstrap_checkpoint", "on_bootstrap_rollback", "on_end_bootstrap")


@runtime_checkable
class DatabusBootstrapConsumer(Protocol):
    """The bootstrap callbacks (Databus names in brackets)."""

    def on_start_bootstrap(self) -> Result:
        """A partition starts bootstrapping [onStartBootstrap]."""
        ...

    def on_start_bootstrap_sequence(self, scn: Scn) -> Result:
        """[onStartBootstrapSequence] snapshot rows (scn: the snapshot's) or a catch-up window."""
        ...

    def on_start_bootstrap_source(self, source: str, schema: str) -> Result:
        """[onStartBootstrapSource]."""
        ...

    def on_bootstrap_event(self, event: DbusEvent) -> Result:
        """[onBootstrapEvent] a row: the latest event of its key with its original
        offset and SCN (a DELETE for a deleted key), or a catch-up event."""
        ...

    def on_end_bootstrap_source(self, source: str) -> Result:
        """[onEndBootstrapSource]."""
        ...

    def on_end_bootstrap_sequence(self, scn: Scn) -> Result:
        """[onEndBootstrapSequence]; CHECKPOINT asks for a checkpoint now."""
        ...

    def on_bootstrap_checkpoint(self, scn: Scn) -> Result:
        """[onBootstrapCheckpoint] the bootstrap's position is about to be saved."""
        ...

    def on_bootstrap_rollback(self, scn: Scn) -> Result:
        """[onBootstrapRollback] the sequence starting at `scn` comes again."""
        ...

    def on_end_bootstrap(self) -> Result:
        """The partition caught up [onStopBootstrap]: ordinary windows follow."""
        ...


@runtime_checkable
class DatabusCombinedConsumer(DatabusConsumer, DatabusBootstrapConsumer, Protocol):
    """Both callback sets and `can_bootstrap()` (Databus `DatabusCombinedConsumer`)."""

    def can_bootstrap(self) -> bool:
        ...


class DatabusCombinedConsumerBase(DatabusConsumerBase):
    """SUCCESS to every stream and bootstrap callback; can_bootstrap() is True."""

    def can_bootstrap(self) -> bool:
        return True

    def on_start_bootstrap(self) -> Result:
        return SUCCESS

    def on_start_bootstrap_sequence(self, scn: Scn) -> Result:
        return SUCCESS

    def on_start_bootstrap_source(self, source: str, schema: str) -> Result:
        return SUCCESS

    def on_bootstrap_event(self, event: DbusEvent) -> Result:
        return SUCCESS

    def on_end_bootstrap_source(self, source: str) -> Result:
        return SUCCESS

    def on_end_bootstrap_sequence(self, scn: Scn) -> Result:
        return SUCCESS

    def on_bootstrap_checkpoint(self, scn: Scn) -> Result:
        return SUCCESS

    def on_bootstrap_rollback(self, scn: Scn) -> Result:
        return SUCCESS

    def on_end_bootstrap(self) -> Result:
        return SUCCESS


def cannot_bootstrap(consumer: object) -> str | None:
    """Why `consumer` cannot take part in a bootstrap (None: it can)."""
    missing = [name for name in BOOTSTRAP_CALLBACK_NAMES
               if not callable(getattr(consumer, name, None))]
    if missing:
        return f"lacks the bootstrap callbacks {missing}"
    can = getattr(consumer, "can_bootstrap", None)
    if callable(can) and not can():
        return "says can_bootstrap() is False"
    return None


ALL_CALLBACK_NAMES = CALLBACK_NAMES + BOOTSTRAP_CALLBACK_NAMES
