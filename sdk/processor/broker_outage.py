"""The processor's broker away: one outage, said once, and its return once.

A processor talks to its broker three ways: each owned partition's Reader,
the balancing cycle (it describes the topic first, and with the broker's
ownership store lists and claims there too) and, through the cycle, the
renewal of its claims. A killed broker is seen by all three: each reader
says it lost the broker, the cycle fails ("balancing failed"), and once
ownership_expiration_ms passes without a renewal the claims lapse. Said
each alone, that is one WARNING per partition plus two more, none saying
what the outage means for the partitions.

`BrokerOutage` folds them into one account:

1. The first sign (a reader's loss, a cycle that cannot reach the broker, or
   a partition's start whose checkpoint read or reader open cannot) is a
   WARNING naming the broker, the partitions held and what becomes of them:
   they run on until their claims lapse, then close, and are balanced again
   once the broker is back (a partition that failed to start closes at once).
2. Every later sign of the same outage (other readers, failed cycles,
   partitions that failed to start, the claims lapsing) is DEBUG; the lapsed
   and the failed partitions are remembered.
3. The first answer from the broker after it (a reader reconnects, or a
   cycle's describe works) is an INFO: how long it was away, how many cycles
   failed, and which partitions lapsed meanwhile.

Only the broker being away is folded: a cycle that fails for another reason
(a Redis ownership store down while the broker answers, a refused password)
is the cycle's own outage (outages.py), said as before.

Pure (no logging, no clock: time is an argument); the processor writes the lines.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from sdk import errors
from sdk.processor.outages import Line, counted, describe


def unreachable(error: BaseException) -> bool:
    """Whether a failed call means the broker did not answer (unreachable, closed
    the connection, or silent past the call's deadline), not that it answered no."""
    if isinstance(error, errors.Unavailable | TimeoutError):
        return True
    return isinstance(error, errors.KeybusError) and error.code == errors.DEADLINE_EXCEEDED


class BrokerOutage:
    """One processor's account of its broker being away (see the module docstring).

    Args:
        what: names the processor in every line ("event processor orders/billing").
        broker: the broker's address, as given.
        expiration_ms: ownership_expiration_ms, said in the warning.
    """

    def __init__(self, what: str, broker: str, expiration_ms: int) -> None:
        self.what = what
        self.broker = broker
        self.expiration_ms = expiration_ms
        self._since_s: float | None = None  # None: the broker answers
        self._cycles = 0  # cycles failed in this outage
        self._lapsed: set[int] = set()  # partitions whose claims lapsed in this outage
        self._failed: set[int] = set()  # partitions that closed failing to reach it

    @property
    def down(self) -> bool:
        return self._since_s is not None

    def process_stream_lost(self, message: str, held: Iterable[int], now_s: float) -> Line:
        """A partition's reader lost the broker; message is its report
        ("lost the broker at HOST:PORT (connection closed); retrying")."""
        return self._lost(message, held, now_s)

    def process_cycle_failed(self, error: BaseException, held: Iterable[int],
                             now_s: float) -> Line:
        """A balancing cycle could not reach the broker (`unreachable(error)`)."""
        self._cycles += 1
        return self._lost(f"lost the broker at {self.broker} ({describe(error)}); retrying",
                          held, now_s)

    def process_partition_failed(self, partition: int, step: str, error: BaseException,
                                 checkpoints_on_broker: bool, held: Iterable[int],
                                 now_s: float) -> Line | None:
        """A partition's step failed: the line to say when the failure is the broker
        being away (the reader's open, or the checkpoint read of a partition that
        starts when the checkpoint store is the broker's), else None (the
        partition's own outage). The partition closes; the next cycle reopens it."""
        calls_broker = step == "reading" or (step == "starting" and checkpoints_on_broker)
        if not (calls_broker and unreachable(error)):
            return None
        self._failed.add(partition)
        others = [p for p in held if p != partition]
        return self._lost(f"partition {partition} ({step}) lost the broker at {self.broker} "
                          f"({describe(error)}) and closes", others, now_s)

    def process_lapsed(self, partitions: Iterable[int]) -> Line:
        """The claims of these partitions lapsed while the broker is away (said
        in the warning; counted in the return)."""
        self._lapsed.update(partitions)
        return Line(logging.DEBUG, f"{self.what}: the claims of partitions "
                                   f"{sorted(partitions)} lapsed while the broker at "
                                   f"{self.broker} is away; closing them")

    def process_back(self, now_s: float) -> Line | None:
        """The broker answered (a reader reconnected, a cycle's call worked): the
        return to say if it was away, else None."""
        if self._since_s is None:
            return None
        parts = []
        if self._cycles:
            parts.append(f"balancing failed {counted(self._cycles)} meanwhile")
        if self._lapsed:
            parts.append(f"the claims of partitions {sorted(self._lapsed)} lapsed and "
                         "they closed; they are balanced again now")
        else:
            parts.append("no claim lapsed")
        if self._failed - self._lapsed:
            parts.append(f"partitions {sorted(self._failed - self._lapsed)} closed when they "
                         "could not reach it; they are balanced again now")
        line = Line(logging.INFO, f"{self.what}: the broker at {self.broker} is back after "
                                  f"{now_s - self._since_s:.1f} s ({'; '.join(parts)})")
        self._since_s, self._cycles, self._lapsed, self._failed = None, 0, set(), set()
        return line

    def _lost(self, seen: str, held: Iterable[int], now_s: float) -> Line:
        if self._since_s is not None:
            return Line(logging.DEBUG, f"{self.what}: {seen}")
        self._since_s = now_s
        partitions = sorted(held)
        if partitions:
            meaning = (f"Partitions {partitions} run on until their claims lapse (no renewal "
                       f"without the broker; ownership_expiration_ms={self.expiration_ms}), "
                       "then close and are balanced again once it is back")
        else:
            meaning = "No partition is held; balancing resumes once it is back"
        return Line(logging.WARNING, f"{self.what}: {seen}. {meaning}; said again only "
                                     "when it is back")
