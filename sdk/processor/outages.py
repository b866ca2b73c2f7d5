"""Once per outage: what the log says about a failure that repeats every cycle.

A store that refuses the password or cannot be reached makes every balancing
cycle fail until it is fixed; a WARNING per cycle buries the rest of the log
and says nothing new. `OutageLog` turns a stream of cycle results into log
lines: a WARNING when a kind of failure starts (with the error's message),
DEBUG while the same kind repeats, a WARNING when the kind changes, and an
INFO when a cycle works again, saying how long it was down and how many
cycles failed. A kind is the exception's class (`Unauthenticated`,
`Unavailable`, ...): the same class with another message is a repeat, still
shown at DEBUG.

Pure (no logging, no clock: time is an argument) so it is tested alone; the
processor writes the lines. Only the log is spared: on_error still gets every
failure, as its docs promise. Messages are the errors' own, so a store's
redaction (the password as ***) carries through.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Line:
    """One log line to write: its level and its text."""

    level: int
    message: str


def cycles(count: int) -> str:
    """"1 cycle", "2 cycles"."""
    return f"{count} cycle" if count == 1 else f"{count} cycles"


def describe(error: BaseException) -> str:
    """The error's message (its repr when it has none)."""
    return str(error) or repr(error)


class OutageLog:
    """Log lines for the results of one repeated job (e.g. the balancing cycle).

    Args:
        what: names the job in every line, e.g. "event processor orders/billing:
            balancing".
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self._kind: type[BaseException] | None = None  # None: working
        self._since_s = 0.0  # when the outage began
        self._failures = 0  # cycles failed in this outage, all kinds
        self._kind_failures = 0  # of them, in a row of the current kind

    @property
    def down(self) -> bool:
        """True from a failure until the next success."""
        return self._kind is not None

    def failed(self, error: BaseException, now_s: float) -> Line:
        """A cycle failed at now_s (seconds, any monotonic clock): the line to log."""
        kind, previous = type(error), self._kind
        if previous is None:
            self._since_s, self._failures, self._kind_failures = now_s, 0, 0
        self._failures += 1
        if kind is previous:
            self._kind_failures += 1
            return Line(logging.DEBUG,
                        f"{self.what} still failing ({kind.__name__}, {cycles(self._failures)}, "
                        f"{now_s - self._since_s:.1f} s): {describe(error)}")
        self._kind = kind
        if previous is None:
            self._kind_failures = 1
            return Line(logging.WARNING,
                        f"{self.what} failed ({kind.__name__}): {describe(error)}; while it "
                        "fails the same way this is not repeated above DEBUG")
        line = Line(logging.WARNING,
                    f"{self.what} now fails differently ({kind.__name__}; was "
                    f"{previous.__name__} for {cycles(self._kind_failures)}): {describe(error)}")
        self._kind_failures = 1
        return line

    def worked(self, now_s: float) -> Line | None:
        """A cycle worked at now_s: the recovery line after an outage, else None."""
        if self._kind is None:
            return None
        line = Line(logging.INFO,
                    f"{self.what} works again after {now_s - self._since_s:.1f} s down "
                    f"(failed {cycles(self._failures)}; last: {self._kind.__name__})")
        self._kind = None
        return line
