"""When a filtered follow read tells how far it passed (Databus's end-of-period events). Pure.

Why: a follow read whose filter (or hash ranges) drops whole stored records
sends nothing for them, so its reader never learns that the windows in them
are over. A Databus consumer then never checkpoints past them, and once
retention passes its old checkpoint a clean restart looks like a gap
("events are missing") although nothing it wanted was missed. Databus's
relay sends end-of-period events for the same reason. Here the read sends a
response without records whose `passed_scn`/`passed_offset` say where the
last record it dropped whole ends (broker/rpc/wire.py `passed_response`).

Rules:
1. Only records dropped whole after the last response count. A response
   with records ends on a record the reader gets (its windows arrive); a
   chunk that ends on records dropped whole leaves a position to tell
   (`Chunk.passed`, always a record's end, never the middle of a window).
2. Bounded: a position is told once `events_max` dropped events piled up
   since the last response, or `interval_ms` passed since it, whichever
   comes first. At the log end (a read pass over) the shell waits for new
   records at most `wait_ms` and then tells. So a busy topic with a rarely
   matching filter costs one small response per interval (or per
   `events_max` events read), and a quiet one hears of the last records it
   passed within an interval.
3. A response sent anyway (the position at the log end) carries what is
   pending at once (`take`).

It knows nothing of gRPC, the store or the clock: time is `now_ms`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.read_path import ReadSpec


def tells_passed(follow: bool, spec: ReadSpec) -> bool:
    """Whether a read tells passed positions at all: only a following one whose
    filter or hash ranges can drop records (a Read, or a Bootstrap stream once
    online); an unfiltered read keeps the loop it had."""
    return follow and (spec.selector is not None or spec.slot_mask is not None)


@dataclass(frozen=True, slots=True)
class Passed:
    """Where the last stored record a read dropped whole ends: its last SCN
    (a window's SCN, a plain batch's last event's) and its last offset."""

    scn: int
    offset: int


class PassedPositions:
    """Rules 1-3 for one follow read (runs on the read's servicer task)."""

    def __init__(self, interval_ms: int, events_max: int, now_ms: int) -> None:
        assert interval_ms > 0 and events_max > 0
        self.interval_ms = interval_ms
        self.events_max = events_max
        self._told_ms = now_ms
        self._dropped_events = 0
        self._pending: Passed | None = None

    @property
    def pending(self) -> Passed | None:
        """The position not told yet, if any."""
        return self._pending

    def process_chunk(self, passed: tuple[int, int] | None, scanned_events: int,
                      sent_records: bool, now_ms: int) -> None:
        """A chunk was read; `sent_records`: its records went out in a response.

        Args:
            passed: `Chunk.passed`, (scn, offset) when the chunk ends on records
                dropped whole.
            scanned_events: the events the chunk looked at (`Chunk.scanned_events`).
        """
        if sent_records:
            self._told_ms = now_ms
            self._dropped_events = 0
            self._pending = None
        else:
            self._dropped_events += scanned_events
        if passed is not None:
            self._pending = Passed(*passed)

    def due(self, now_ms: int) -> Passed | None:
        """The position to tell now (rule 2), or None; told once returned."""
        if self._pending is None:
            return None
        if self._dropped_events < self.events_max and now_ms - self._told_ms < self.interval_ms:
            return None
        return self.take(now_ms)

    def wait_ms(self, now_ms: int) -> int | None:
        """At the log end: how long to wait for new records before telling what
        is pending (0: tell now); None: nothing pending, wait for records only."""
        if self._pending is None:
            return None
        return max(0, self._told_ms + self.interval_ms - now_ms)

    def take(self, now_ms: int) -> Passed | None:
        """What is pending, for a response sent now anyway (rule 3)."""
        passed, self._pending = self._pending, None
        self._told_ms = now_ms
        self._dropped_events = 0
        return passed
