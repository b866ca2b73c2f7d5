"""What readers of one partition may see: the log end held back to the high watermark. Pure.

Kafka's rule: a leader whose topic is acknowledged after n copies exposes to
readers, subscriptions, the compacted view and bootstrap only the offsets n
followers hold (the high watermark); a follower learns the leader's high
watermark with the data it copies and exposes no more of its own log. An
event a reader saw is then acknowledged, on every broker that may be
elected, and never dropped by a failover's truncation.

Rules:
1. The readable end is the durable log end, or the high watermark when it is
   lower. No high watermark (None) = no limit (a topic acknowledged by the
   leader alone, a broker outside a cluster).
2. The readable end never moves back, except by a truncation below it: what
   readers saw stays readable (a lower high watermark, e.g. a new leader's
   before its followers report, holds back only what was not yet readable).
3. The last SCN readers are told is that of the last published log end at or
   below the readable end (a high watermark inside a commit group reports the
   group before it; one entry per publish, coarsened past `ENDS_KEPT_MAX`).
"""

from __future__ import annotations

from collections import deque

ENDS_KEPT_MAX = 4096


class ReadLimit:
    """One partition's readable end and its SCN (see the module docstring)."""

    def __init__(self, log_end: int, last_scn: int) -> None:
        self.high_watermark: int | None = None
        self.log_end = log_end
        self.readable_end = log_end
        self.readable_scn = last_scn
        self._log_scn = last_scn
        # (end offset, last SCN) of published log ends above the readable end.
        self._ends: deque[tuple[int, int]] = deque()

    def hold_back(self, offset: int) -> None:
        """Start with readers held at `offset` (a broker of a cluster that restarted:
        until it learns the high watermark, its tail may be unacknowledged).
        Only before any reader came; the SCN readers are told is 0 until known."""
        assert offset <= self.readable_end
        if offset < self.readable_end:
            self._ends.appendleft((self.readable_end, self.readable_scn))
            self.readable_end, self.readable_scn = offset, 0

    def process_log_end(self, log_end: int, last_scn: int) -> None:
        """The durable log end moved (an append, or a truncation when lower)."""
        while self._ends and self._ends[-1][0] > log_end:
            self._ends.pop()
        if log_end > self.readable_end and (not self._ends or self._ends[-1][0] < log_end):
            self._ends.append((log_end, last_scn))
            if len(self._ends) > ENDS_KEPT_MAX:  # rule 3: an older SCN is still true
                self._ends = deque(list(self._ends)[1::2])
        self.log_end, self._log_scn = log_end, last_scn
        self._settle()

    def process_high_watermark(self, high_watermark: int | None) -> None:
        """The high watermark moved (None: no limit)."""
        assert high_watermark is None or high_watermark >= 0
        self.high_watermark = high_watermark
        self._settle()

    def _settle(self) -> None:
        limit = self.log_end if self.high_watermark is None \
            else min(self.log_end, self.high_watermark)
        if limit <= self.readable_end:  # rule 2: only a truncation moves it back
            if self.log_end < self.readable_end:
                self.readable_end, self.readable_scn = self.log_end, self._log_scn
            return
        while self._ends and self._ends[0][0] <= limit:
            self.readable_scn = self._ends.popleft()[1]
        self.readable_end = limit
        if limit == self.log_end:
            self.readable_scn = self._log_scn
