"""One partition's copy as describe, metrics and the sweep see it (`CopyState`),
and the wall clock they count it on."""

from __future__ import annotations

import time
from dataclasses import dataclass


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class CopyState:
    """One partition's copy, as describe and metrics show it.

    The lag is counted from the upstream end last heard, so it is known only
    while the upstream answers: from a failed attempt or a lost stream until
    the next answer (`unreachable_since_ms`), or while it is silent
    (`unheard_since_ms`), describe and metrics show it as unknown, not as the
    last value (a 0 would say "caught up" of a copy that cannot see what its
    upstream holds now).
    """

    upstream_end: int = 0
    # wall clock of the upstream's last answer for this partition: records, or the
    # answer an idle upstream sends each relay_idle_answer_ms (replica_read); 0 = never
    last_read_ms: int = 0
    caught_up_ms: int = 0  # wall clock when this copy last held all the upstream had
    unreachable_since_ms: int = 0  # wall clock when it lost its upstream; 0 = reaching it
    error: str = ""
    done: bool = False  # a catch-up copy reached its stop offset

    def process_answer(self, upstream_end: int, log_end: int, now_ms: int) -> None:
        """The upstream answered (records or an idle answer) with its log end."""
        self.last_read_ms = now_ms
        self.upstream_end = upstream_end
        if log_end >= upstream_end:
            self.caught_up_ms = now_ms
        self.unreachable_since_ms = 0
        self.error = ""

    def unheard_since_ms(self, now_ms: int, silence_ms: int) -> int:
        """Wall clock since when the upstream is not reached, 0 = reached: from a
        failed attempt or a lost stream, or from its last answer once it has been
        silent longer than silence_ms (frozen with its connection open, so no
        stream breaks yet; RelaySettings.upstream_silence_ms)."""
        if self.unreachable_since_ms or self.done:  # a finished catch-up reads no more
            return self.unreachable_since_ms
        if self.last_read_ms and now_ms - self.last_read_ms > silence_ms:
            return self.last_read_ms
        return 0

    def process_lost(self, reason: str, now_ms: int) -> None:
        """An attempt failed or the stream broke: the upstream is not reached since
        the first such failure (later ones keep that time)."""
        self.error = reason
        if not self.unreachable_since_ms:
            self.unreachable_since_ms = now_ms
