"""The window runner's vocabulary: its phases, their transition table, its steps.

Job: the data the runner (`runner.py`) and its shell (`registration.py`)
share: the `Phase`s of a registration, `TRANSITIONS` (which inputs may move
which phase where; anything else is a bug in the shell, `RunnerStateError`)
and the steps the runner answers (`Persist`, `Sleep`, `Finished`, or a
`Segment` of calls). Kept apart from the runner's decisions so the table can
be read (and tested) on its own and `runner.py` keeps one job. Pure data: no
I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sdk.databus.window import Segment


class Phase(Enum):
    NEW = "new"
    STARTING = "starting"  # on_start_consumption runs
    WAITING = "waiting"  # between windows
    OPEN = "open"  # a streamed window is open, waiting for its next piece
    RUNNING = "running"  # a window's segments run
    CHECKPOINTING = "checkpointing"  # on_checkpoint runs
    PERSISTING = "persisting"  # the shell writes the checkpoint
    BACKING_OFF = "backing_off"  # the shell sleeps before a retry
    ROLLING_BACK = "rolling_back"  # on_rollback runs
    ANNOUNCING = "announcing"  # on_start_bootstrap / on_end_bootstrap runs
    REPORTING = "reporting"  # on_error runs
    STOPPING = "stopping"  # on_stop_consumption runs
    STOPPED = "stopped"


P = Phase
# (phase, input) -> the phases that input may lead to. Anything else is a bug in the shell.
TRANSITIONS: dict[tuple[Phase, str], frozenset[Phase]] = {
    (P.NEW, "start"): frozenset({P.STARTING}),
    (P.NEW, "stop"): frozenset({P.STOPPED}),
    (P.STARTING, "result"): frozenset({P.WAITING, P.STOPPING}),
    (P.WAITING, "piece"): frozenset({P.RUNNING, P.WAITING, P.CHECKPOINTING, P.REPORTING}),
    (P.WAITING, "tick"): frozenset({P.WAITING, P.CHECKPOINTING}),
    (P.WAITING, "stop"): frozenset({P.CHECKPOINTING, P.STOPPING}),
    (P.WAITING, "report"): frozenset({P.REPORTING}),
    (P.WAITING, "marker"): frozenset({P.ANNOUNCING}),
    (P.WAITING, "passed"): frozenset({P.WAITING, P.CHECKPOINTING}),
    (P.ANNOUNCING, "result"): frozenset({P.WAITING, P.STOPPING}),
    (P.OPEN, "piece"): frozenset({P.RUNNING, P.OPEN, P.WAITING, P.CHECKPOINTING, P.REPORTING}),
    (P.OPEN, "abort"): frozenset({P.ROLLING_BACK}),
    (P.OPEN, "stop"): frozenset({P.CHECKPOINTING, P.STOPPING}),
    (P.OPEN, "report"): frozenset({P.REPORTING}),
    (P.OPEN, "passed"): frozenset({P.OPEN}),  # ignored: never a checkpoint mid-window
    (P.RUNNING, "result"): frozenset({P.RUNNING, P.OPEN, P.WAITING, P.CHECKPOINTING,
                                      P.BACKING_OFF, P.REPORTING, P.STOPPING}),
    (P.CHECKPOINTING, "result"): frozenset({P.PERSISTING, P.WAITING, P.CHECKPOINTING,
                                            P.BACKING_OFF, P.REPORTING, P.STOPPING}),
    (P.PERSISTING, "persisted"): frozenset({P.WAITING, P.CHECKPOINTING, P.STOPPING,
                                            P.REPORTING}),
    (P.BACKING_OFF, "slept"): frozenset({P.ROLLING_BACK}),
    (P.ROLLING_BACK, "result"): frozenset({P.RUNNING, P.WAITING, P.STOPPING}),
    (P.REPORTING, "result"): frozenset({P.WAITING, P.OPEN, P.CHECKPOINTING, P.STOPPING}),
    (P.STOPPING, "result"): frozenset({P.STOPPED}),
}


class RunnerStateError(RuntimeError):
    """An input the current phase does not allow: a bug in the shell."""


@dataclass(frozen=True, slots=True)
class Persist:
    """Write a checkpoint: the window at `scn`, last offset `offset`, of `partition`
    (`position`: a bootstrap's, from its last piece; None for an ordinary window)."""

    partition: int
    offset: int
    scn: int
    position: object = None


@dataclass(frozen=True, slots=True)
class Sleep:
    ms: int


@dataclass(frozen=True, slots=True)
class Finished:
    """Consumption is over; `error` is None after a clean stop."""

    error: Exception | None


Step = Segment | Persist | Sleep | Finished
