"""Capped exponential backoff for a follower's retries. Pure.

Retries never stop (the seed: "retries are always infinite, with backoff
fixed to top off at 1 minute"); the delay doubles from `first_ms` up to
`max_ms` and starts over after a success.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Backoff:
    first_ms: int
    max_ms: int
    _next_ms: int = 0

    def __post_init__(self) -> None:
        assert 0 < self.first_ms <= self.max_ms
        self._next_ms = self.first_ms

    def next_ms(self) -> int:
        """The delay before the next retry; doubles each call, up to max_ms."""
        delay = self._next_ms
        self._next_ms = min(self._next_ms * 2, self.max_ms)
        return delay

    def reset(self) -> None:
        """After a success: the next failure waits first_ms again."""
        self._next_ms = self.first_ms
