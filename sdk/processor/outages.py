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

A partition fails alone too (its checkpoint store read when it starts, an
exception from the application's on_event, ...) and, since it reopens every
cycle, just as often: `PartitionOutages` keeps one `OutageLog` per partition
and step, so each step of each partition says its outage once, and says it
works again when that step next succeeds.

Pure (no logging, no clock: time is an argument) so it is tested alone; the
processor writes the lines. Only the log is spared: on_error still gets every
failure, as its docs promise. Messages are the errors' own, so a store's
redaction (the password as ***) carries through.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Line:
    """One log line to write: its level and its text."""

    level: int
    message: str


def counted(count: int, unit: str = "cycle") -> str:
    """"1 cycle", "2 cycles" (or of another unit: "2 attempts")."""
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"


def describe(error: BaseException) -> str:
    """The error's message (its repr when it has none)."""
    return str(error) or repr(error)


class OutageLog:
    """Log lines for the results of one repeated job (e.g. the balancing cycle).

    Args:
        what: names the job in every line, e.g. "event processor orders/billing:
            balancing".
        unit: what one failure is counted as ("cycle": "failed 5 cycles").
    """

    def __init__(self, what: str, unit: str = "cycle") -> None:
        self.what = what
        self.unit = unit
        self._kind: type[BaseException] | None = None  # None: working
        self._since_s = 0.0  # when the outage began
        self._failures = 0  # cycles failed in this outage, all kinds
        self._kind_failures = 0  # of them, in a row of the current kind

    @property
    def down(self) -> bool:
        """True from a failure until the next success."""
        return self._kind is not None

    def failed(self, error: BaseException, now_s: float) -> Line:
        """It failed at now_s (seconds, any monotonic clock): the line to log."""
        kind, previous = type(error), self._kind
        if previous is None:
            self._since_s, self._failures, self._kind_failures = now_s, 0, 0
        self._failures += 1
        if kind is previous:
            self._kind_failures += 1
            return Line(logging.DEBUG,
                        f"{self.what} still failing ({kind.__name__}, {counted(self._failures, self.unit)}, "
                        f"{now_s - self._since_s:.1f} s): {describe(error)}")
        self._kind = kind
        if previous is None:
            self._kind_failures = 1
            return Line(logging.WARNING,
                        f"{self.what} failed ({kind.__name__}): {describe(error)}; while it "
                        "fails the same way this is not repeated above DEBUG")
        line = Line(logging.WARNING,
                    f"{self.what} now fails differently ({kind.__name__}; was "
                    f"{previous.__name__} for {counted(self._kind_failures, self.unit)}): {describe(error)}")
        self._kind_failures = 1
        return line

    def worked(self, now_s: float) -> Line | None:
        """It worked at now_s: the recovery line after an outage, else None."""
        if self._kind is None:
            return None
        line = Line(logging.INFO,
                    f"{self.what} works again after {now_s - self._since_s:.1f} s down "
                    f"(failed {counted(self._failures, self.unit)}; last: {self._kind.__name__})")
        self._kind = None
        return line


class PartitionOutages:
    """One `OutageLog` per partition and step, made when a step first fails.

    A step is where a partition's work failed, e.g. "starting" (fence and
    checkpoint read), "on_event": the kind of an outage is per step, so an
    on_event that raises and an on_partition_close that raises after it, in
    the same attempt, are two outages said once each instead of a change of
    kind every time. A step that works again is dropped (with its recovery
    line), so only failing steps are kept.

    Args:
        what: names the processor in every line, e.g. "event processor
            orders/billing".
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self._logs: dict[tuple[int, str], OutageLog] = {}
        self._refused_epochs: dict[int, int] = {}  # partition -> the claim epoch last refused

    def fence_refused(self, partition: int, epoch: int) -> bool:
        """The checkpoint store refused to register this claim's epoch: True when it
        refused the same epoch of that partition before. A race refuses an epoch
        once (whoever fenced a newer one holds the partition now, and this processor
        wins it back, if ever, under another epoch); the same epoch refused again
        means the ownership store still gives it to this processor while the fence
        says otherwise, which no cycle mends (a stale fence)."""
        again = self._refused_epochs.get(partition) == epoch
        self._refused_epochs[partition] = epoch
        return again

    def fence_registered(self, partition: int) -> None:
        self._refused_epochs.pop(partition, None)

    def failed(self, partition: int, step: str, error: BaseException, now_s: float) -> Line:
        """That partition's step failed at now_s: the line to log."""
        outage = self._logs.get((partition, step))
        if outage is None:
            outage = OutageLog(f"{self.what} partition {partition} ({step})", unit="attempt")
            self._logs[(partition, step)] = outage
        return outage.failed(error, now_s)

    def worked(self, partition: int, step: str, now_s: float) -> Line | None:
        """That partition's step worked at now_s: the recovery line after an
        outage of that step, else None."""
        outage = self._logs.pop((partition, step), None)
        return None if outage is None else outage.worked(now_s)

    def __len__(self) -> int:
        """Steps failing now, of every partition (0 nearly always: a pump asks this
        before it reads the clock for a step that worked, once per batch)."""
        return len(self._logs)

    def down(self, partition: int) -> list[str]:
        """The steps of that partition failing now, in the order they failed first."""
        return [step for (p, step) in self._logs if p == partition]

    def keep(self, partitions: Iterable[int]) -> None:
        """Forget the outages of every other partition (no longer owned: the
        owner that takes one over says its own; this one starts afresh if it
        wins it back)."""
        kept = set(partitions)
        self._logs = {key: outage for key, outage in self._logs.items() if key[0] in kept}
        self._refused_epochs = {p: e for p, e in self._refused_epochs.items() if p in kept}
