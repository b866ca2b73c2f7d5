"""One registration, one broker, one outage said once.

A registration reads over one channel through several streams (a Reader per
partition, or a Consumer) and watches that channel (`ConnectionWatch`). A
killed broker ends them all at once, and each would say so: a WARNING per
partition and another from the watch, then as many returns. `LinkOutage`
folds them: the first loss is said (WARNING), the other streams' at DEBUG;
the first return after it is said (INFO: the broker answers again, whichever
stream or the channel saw it first), the others at DEBUG. A loss after a
return said is a new outage, said again. A registration whose broker never
answered its first call has no windows to resume: its lines say it starts once
the broker answers.

Pure (no logging, no clock); the shell (connection.BrokerLink) writes the
lines or hands them to the application's on_connection_change.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Said:
    """What to say: its level (WARNING/INFO are said, DEBUG is a repeat), the
    message in the SDK's words (as every client reports, for on_connection_change)
    and the log line (the registration named, with what it means for windows)."""

    level: int
    message: str
    line: str

    @property
    def news(self) -> bool:
        """A loss or return said now, not a repeat."""
        return self.level > logging.DEBUG


class LinkOutage:
    """The lost/back state of one registration's link (see the module docstring).

    Args:
        name: the registration's name, first in every log line.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.lost = False
        self.reached = False  # the broker answered the registration's first call
        self._lost_unreached = False  # the outage said began before that answer

    def process_reached(self) -> None:
        """The broker answered the registration's first call (describe_topic): an
        outage from now on interrupts windows that were read."""
        self.reached = True

    def process_lost(self, message: str) -> Said:
        """A stream (or the channel watch) lost the broker; message says how."""
        if self.lost:
            return Said(logging.DEBUG, message, f"{self.name}: {message}")
        self.lost, self._lost_unreached = True, not self.reached
        # a registration that never started has no windows to resume
        then = ("the registration starts once it answers" if self._lost_unreached
                else "windows resume where they stopped")
        return Said(logging.WARNING, message, f"{self.name}: {message}; {then}")

    def process_back(self, message: str) -> Said:
        """A stream (or the channel) reaches the broker again after a loss."""
        if not self.lost:
            return Said(logging.DEBUG, message, f"{self.name}: {message}")
        self.lost = False
        then = "consumption starts" if self._lost_unreached else "consumption goes on"
        return Said(logging.INFO, message, f"{self.name}: {message}; {then}")
