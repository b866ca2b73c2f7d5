"""Key_Shared consistent-hashing mode (Pulsar's ConsistentHashingStickyKeyConsumerSelector).

Job: place ring points per consumer in the 0..65535 slot space and give every
slot to the consumer of the first point at or after it.

Rules:
1. A consumer has `points_per_consumer` points (default 100, as Pulsar's
   `subscriptionKeySharedConsistentHashingReplicaPoints`). Point i of
   consumer `name` sits at ``slot_of(name + "\\0" + str(i))``: derived from
   the name only, so a consumer that leaves and comes back under the same
   name gets exactly its old ranges back, whatever happened in between.
2. Lookup: the owner of slot s is the owner of the first point >= s; slots
   after the last point wrap around to the first point.
3. Points of different consumers at one position: the lowest name wins, so
   the map depends only on the set of names, never on join order.
4. Joining moves slots only to the newcomer; leaving moves only the
   leaver's slots, to the owners of the next points on the ring.

Every slot has exactly one owner while at least one consumer is attached.

It must not know about: events, permits, acks, clocks or dispatch rates.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.subscription.selector import RangeChanges, Segment, SegmentSelector
from sdk.core.hashing import SLOT_MAX, slot_of
from sdk.core.model import HashRange

POINTS_PER_CONSUMER_DEFAULT = 100


def ring_points(name: str, points_per_consumer: int) -> list[int]:
    """The sorted, distinct ring positions of consumer `name`."""
    return sorted({slot_of(f"{name}\0{i}") for i in range(points_per_consumer)})


class ConsistentHashSelector(SegmentSelector):
    """Hash ring over the slot space; see the module docstring for the rules."""

    def __init__(self, points_per_consumer: int = POINTS_PER_CONSUMER_DEFAULT) -> None:
        super().__init__()
        if points_per_consumer < 1:
            raise ValueError(
                f"points_per_consumer {points_per_consumer} is invalid: need >= 1"
            )
        self.points_per_consumer = points_per_consumer
        self._ring: dict[int, list[str]] = {}  # position -> names there, sorted

    def add_consumer(
        self, name: str, now_ms: int, ranges: Sequence[HashRange] = ()
    ) -> RangeChanges:
        self._refuse_declared(name, ranges, "consistent hashing")
        self._refuse_duplicate(name)
        self._joined_ms[name] = now_ms
        for position in ring_points(name, self.points_per_consumer):
            names = self._ring.setdefault(position, [])
            names.append(name)
            names.sort()
        return self._replace_segments(self._ring_segments())

    def remove_consumer(self, name: str) -> RangeChanges:
        self._check_known(name)
        del self._joined_ms[name]
        for position in ring_points(name, self.points_per_consumer):
            names = self._ring[position]
            names.remove(name)
            if not names:
                del self._ring[position]
        return self._replace_segments(self._ring_segments())

    def ring(self) -> list[tuple[int, str]]:
        """(position, winning consumer) of every occupied ring point, in order."""
        return [(position, self._ring[position][0]) for position in sorted(self._ring)]

    def _ring_segments(self) -> list[Segment]:
        points = self.ring()
        if not points:
            return []
        segments: list[Segment] = []
        previous = -1
        for position, name in points:
            segments.append((previous + 1, position, name))
            previous = position
        if previous < SLOT_MAX:
            segments.append((previous + 1, SLOT_MAX, points[0][1]))
        return segments
