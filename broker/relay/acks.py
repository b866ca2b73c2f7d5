"""Acknowledged after n copies: which waiting produces the followers' positions release. Pure.

Rules:
1. A follower's position is the end of what it holds durably on one
   partition, reported for one leader epoch; positions only move forward
   within an epoch (a stale report is ignored), and a new epoch starts from
   nothing (the shell makes a new tracker).
2. An event whose end offset is E is acknowledged once `copies` followers
   report a position >= E: the `copies`-th highest position is the
   acknowledged end. With copies = 0 everything is acknowledged at once.
3. Waiters are released in end-offset order, whole (a window is one record,
   so one waiter).
4. A follower *follows* while a report stream that brought one of its
   positions for this epoch is open (`attach` .. `detach`): connected,
   however far behind (a paused or slow follower still counts), and for
   `follower_grace_ms` after its last such stream closed (Kafka's
   `replica.lag.time.max.ms`): a stream ends for a moment when the
   follower's token expires and it reopens at once, on a network blip, or
   when its broker restarts, and the follower is back within moments. One
   whose process is gone for good stops counting once the grace is over.
5. A produce is refused before it is stored when fewer than `copies`
   followers follow (`short_of_followers`), but not while the leader waits
   for its followers to attach: until `copies` of them followed at once, or
   for `attach_ms` after it began leading (followers attach after a leader
   starts or is elected). Then, as for a produce already waiting when
   followers drop away or while one is in its grace, the produce is stored
   and waits for its copies.
6. Every change of the set of followers that follow (rule 4) is reported
   once (`following_changes`): one that stopped following when its grace
   was over, one that follows (again) when a report of it came; a follower
   back within its grace never stopped. Kafka logs these as "Shrinking ISR"
   and "Expanding ISR"; a shell asks on each report, each closed stream and
   on a timer (a grace ends with no event of its own).

Time is an argument (milliseconds on one monotonic clock): the tracker reads
no clock.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Generic, TypeVar

T = TypeVar("T")


class AckTracker(Generic[T]):
    """Followers' positions and the produces waiting on them (one partition)."""

    def __init__(self, copies: int, follower_grace_ms: int = 0) -> None:
        assert copies >= 0 and follower_grace_ms >= 0
        self.copies = copies
        self.follower_grace_ms = follower_grace_ms
        self.positions: dict[str, int] = {}
        self._waiting: list[tuple[int, int, T]] = []
        self._order = itertools.count()
        self._streams: set[tuple[object, str]] = set()  # (open report stream, follower)
        # follower -> when its last open stream closed (no stream open now)
        self._left: dict[str, float] = {}
        self.filled = copies == 0  # `copies` followers followed at once (rule 5)
        self._reported: set[str] = set()  # the following set last reported (rule 6)

    def acked_end(self) -> int | None:
        """Offsets below this are held by `copies` followers (None = no limit)."""
        if self.copies == 0:
            return None
        if len(self.positions) < self.copies:
            return 0
        return heapq.nlargest(self.copies, self.positions.values())[-1]

    def add(self, end_offset: int, token: T) -> bool:
        """Wait for copies of everything below end_offset; True when they exist already."""
        acked = self.acked_end()
        if acked is None or end_offset <= acked:
            return True
        heapq.heappush(self._waiting, (end_offset, next(self._order), token))
        return False

    def process_position(self, follower: str, end_offset: int) -> list[T]:
        """A follower's report; returns the waiters it releases (rule 1-3)."""
        if end_offset <= self.positions.get(follower, -1):
            return []
        self.positions[follower] = end_offset
        acked = self.acked_end()
        released: list[T] = []
        while self._waiting and (acked is None or self._waiting[0][0] <= acked):
            released.append(heapq.heappop(self._waiting)[2])
        return released

    def attach(self, follower: str, stream: object) -> bool:
        """A report of `follower` came on `stream` (rule 4): it follows, its grace ends.
        Whether the stream is new here: only then may the following set have changed
        (rule 6); every later report on it finds it attached and costs a set lookup."""
        entry = (stream, follower)
        if entry in self._streams:
            return False
        self._streams.add(entry)
        self._left.pop(follower, None)
        self.filled = self.filled or len(self._open()) >= self.copies
        return True

    def detach(self, stream: object, now_ms: float) -> None:
        """`stream` closed: its follower no longer follows through it; one left with no
        open stream follows for `follower_grace_ms` from now (rule 4)."""
        closed = {follower for entry_stream, follower in self._streams if entry_stream is stream}
        self._streams = {entry for entry in self._streams if entry[0] is not stream}
        # kept past the grace (one entry per follower that ever reported in this
        # epoch): `state` says since when one stopped following
        for follower in closed - self._open():
            self._left[follower] = now_ms

    def following(self, now_ms: float) -> int:
        """Followers with an open report stream, or in their grace (rule 4). Those in
        `_left` have none open (`attach` takes them out), so the two never overlap."""
        return len(self._open()) + sum(1 for at in self._left.values()
                                       if self._in_grace(at, now_ms))

    def in_grace(self, now_ms: float) -> list[str]:
        """Followers that follow only by their grace now: no open stream (rule 4)."""
        return sorted(f for f, at in self._left.items() if self._in_grace(at, now_ms))

    def grace_left_ms(self, follower: str, now_ms: float) -> int:
        """How long `follower` follows on by its grace alone: 0 when it has an open
        stream, or when it has none and its grace is over (rule 4)."""
        left = self._left.get(follower)
        if left is None or follower in self._open() or not self._in_grace(left, now_ms):
            return 0
        return max(1, int(left + self.follower_grace_ms - now_ms))

    def state(self, follower: str, now_ms: float) -> tuple[str, int]:
        """(state, ms) of `follower` (rule 4), for people: ("following", 0) with an
        open stream; ("in_grace", ms of grace left); ("stopped", ms since its grace
        ended); ("", 0) for one never attached here."""
        if follower in self._open():
            return "following", 0
        left = self._left.get(follower)
        if left is None:
            return "", 0
        if self._in_grace(left, now_ms):
            return "in_grace", self.grace_left_ms(follower, now_ms)
        return "stopped", int(now_ms - left - self.follower_grace_ms)

    def following_changes(self, now_ms: float) -> list[tuple[str, bool]]:
        """(follower, follows now) for each follower that stopped or began following
        since the last call, those that stopped first, each sorted (rule 6)."""
        now = self._open() | set(self.in_grace(now_ms))
        stopped, began = sorted(self._reported - now), sorted(now - self._reported)
        self._reported = now
        return [(f, False) for f in stopped] + [(f, True) for f in began]

    def _open(self) -> set[str]:
        return {follower for _, follower in self._streams}

    def _in_grace(self, left_ms: float, now_ms: float) -> bool:
        return now_ms - left_ms < self.follower_grace_ms

    def short_of_followers(self, now_ms: float, led_ms: float, attach_ms: int) -> bool:
        """Refuse a produce before storing it (rule 5)? `led_ms`: how long this leader leads."""
        if self.following(now_ms) >= self.copies:
            return False
        return self.filled or led_ms >= attach_ms

    def drain(self) -> list[T]:
        """Every waiter, e.g. to fail them when leadership ends."""
        waiting = [token for _, _, token in sorted(self._waiting)]
        self._waiting.clear()
        return waiting

    @property
    def waiting(self) -> int:
        return len(self._waiting)
