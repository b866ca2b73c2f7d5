"""Key_Shared auto-split mode, the hash-range variant of PIP-34.

Job: keep 0..65535 cut into one contiguous range per consumer.

Rules:
1. The first consumer owns 0..65535. With no consumer, no slot has an owner.
2. A joining consumer takes the upper half of the busiest consumer's range
   (the busiest keeps the lower half, the larger one when the size is odd).
   Busiest = the largest range; a tie goes to the highest dispatch rate, then
   to the lowest name (so the choice never depends on join order).
3. A leaving consumer's range goes to the adjacent consumer (the one whose
   range ends just below it or starts just above it) with the lower dispatch
   rate; a tie, or equal rates, goes to the left (lower) neighbour.
4. Dispatch rates are inputs (`set_dispatch_rate`), measured by the shell;
   an unknown rate is 0.
5. A range of one slot cannot be split: a join then raises `SelectorFull`.

Every slot therefore has exactly one owner while at least one consumer is
attached. Pulsar's weakness stays (apache/pulsar#6791): ranges can become
uneven; use consistent hashing when that matters.

It must not know about: events, permits, acks, clocks or how rates are measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.subscription.selector import (
    RangeChanges,
    Segment,
    SegmentSelector,
    SelectorError,
    SelectorFull,
)
from sdk.core.hashing import SLOT_MAX
from sdk.core.model import HashRange


class AutoSplitSelector(SegmentSelector):
    """PIP-34 auto-split over hash ranges; see the module docstring for the rules."""

    def __init__(self) -> None:
        super().__init__()
        self._rates: dict[str, float] = {}

    def set_dispatch_rate(self, name: str, rate: float) -> None:
        """Record `name`'s measured dispatch rate (events per second, >= 0)."""
        self._check_known(name)
        if not rate >= 0:
            raise SelectorError(f"dispatch rate {rate} of consumer {name!r} is invalid: need >= 0")
        self._rates[name] = rate

    def dispatch_rate(self, name: str) -> float:
        self._check_known(name)
        return self._rates.get(name, 0.0)

    def add_consumer(
        self, name: str, now_ms: int, ranges: Sequence[HashRange] = ()
    ) -> RangeChanges:
        self._refuse_declared(name, ranges, "auto-split")
        self._refuse_duplicate(name)
        if not self._segments:
            self._joined_ms[name] = now_ms
            return self._replace_segments([(0, SLOT_MAX, name)])
        i = self._busiest()
        first, last, owner = self._segments[i]
        if first == last:
            raise SelectorFull(
                f"consumer {name!r} cannot join: every range is one slot wide "
                f"({len(self._joined_ms)} consumers already share the 65536 slots)"
            )
        self._joined_ms[name] = now_ms
        split = last - (last - first + 1) // 2 + 1
        segments = list(self._segments)
        segments[i : i + 1] = [(first, split - 1, owner), (split, last, name)]
        return self._replace_segments(segments)

    def remove_consumer(self, name: str) -> RangeChanges:
        self._check_known(name)
        del self._joined_ms[name]
        self._rates.pop(name, None)
        i = next(k for k, segment in enumerate(self._segments) if segment[2] == name)
        first, last, _ = self._segments[i]
        segments = list(self._segments)
        heir = self._heir(i)
        if heir is None:
            return self._replace_segments([])
        if heir < i:
            merged: Segment = (segments[heir][0], last, segments[heir][2])
            segments[heir : i + 1] = [merged]
        else:
            merged = (first, segments[heir][1], segments[heir][2])
            segments[i : heir + 1] = [merged]
        return self._replace_segments(segments)

    def _busiest(self) -> int:
        """Index of the segment to split: largest, then highest rate, then lowest name."""
        best = 0
        best_key = self._busy_key(0)
        for i in range(1, len(self._segments)):
            key = self._busy_key(i)
            if key[:2] > best_key[:2] or (key[:2] == best_key[:2] and key[2] < best_key[2]):
                best, best_key = i, key
        return best

    def _busy_key(self, i: int) -> tuple[int, float, str]:
        first, last, name = self._segments[i]
        return (last - first + 1, self._rates.get(name, 0.0), name)

    def _heir(self, i: int) -> int | None:
        """Index of the neighbour that inherits segment i: lower rate, tie -> left."""
        left = i - 1 if i > 0 else None
        right = i + 1 if i + 1 < len(self._segments) else None
        if left is None or right is None:
            return left if right is None else right
        left_rate = self._rates.get(self._segments[left][2], 0.0)
        right_rate = self._rates.get(self._segments[right][2], 0.0)
        return right if right_rate < left_rate else left
