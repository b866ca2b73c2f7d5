"""The consumers of one subscription partition as its core sees them.

Job: a consumer's settings, permits, pause state, what it holds and its
dispatch rate; and the owner-index view that `plan_keyed` works with (an
owner table's names mapped to members, permits as one array).

It must not know about gRPC streams, the log or the clock beyond `now_ms`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from broker.subscription.holdings import Holding
from sdk.core.model import HashRange


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What a consumer asked for when it attached (validated by the shell)."""

    name: str
    priority: int = 0
    sticky_ranges: tuple[HashRange, ...] = ()
    ack_timeout_ms: int = 0  # 0 = none
    look_ahead_max: int = 0  # 0 = the broker's limit


class RateMeter:
    """Events per second over the last whole second (cheap: one add per send)."""

    __slots__ = ("_count", "_rate", "_window_start_ms")

    def __init__(self, now_ms: int) -> None:
        self._window_start_ms = now_ms
        self._count = 0
        self._rate = 0.0

    def add(self, events: int, now_ms: int) -> None:
        if now_ms - self._window_start_ms >= 1000:  # as `_roll` checks: a call less a send
            self._roll(now_ms)
        self._count += events

    def rate(self, now_ms: int) -> float:
        self._roll(now_ms)
        return self._rate

    def _roll(self, now_ms: int) -> None:
        elapsed = now_ms - self._window_start_ms
        if elapsed >= 1000:
            self._rate = self._count * 1000 / elapsed if elapsed < 2000 else 0.0
            self._count = 0
            self._window_start_ms = now_ms


@dataclass(slots=True)
class Member:
    """One attached consumer on one partition."""

    spec: MemberSpec
    joined_ms: int
    permits: int = 0
    paused: bool = False
    delivered: int = 0
    holding: Holding = field(default_factory=Holding)
    meter: RateMeter = field(init=False)
    next_timeout_ms: int | None = None  # when its oldest held event times out

    def __post_init__(self) -> None:
        self.meter = RateMeter(self.joined_ms)

    @property
    def name(self) -> str:
        return self.spec.name

    def available(self, unacked_max: int) -> int:
        """Events it may be sent now: its permits, within its unacked limit, 0 when paused."""
        if self.paused:
            return 0
        return max(0, min(self.permits, unacked_max - self.holding.count))


def permits_available(members: list[Member | None], unacked_max: int) -> list[int]:
    """Permits available per owner index (index 0, no owner, has none)."""
    return [0 if m is None else m.available(unacked_max) for m in members]


def permit_array(members: list[Member | None], unacked_max: int) -> npt.NDArray[np.int64]:
    """`permits_available` as an array."""
    return np.array(permits_available(members, unacked_max), np.int64)
