"""Key_Shared sticky mode: consumers declare the hash ranges they serve.

Job: accept or refuse each consumer's declared ranges, and answer who owns a slot.

Rules:
1. A consumer declares at least one inclusive range in 0..65535. Its own
   ranges must not overlap each other (touching ones are merged).
2. A range that overlaps a range of another attached consumer is refused
   with `RangeConflict`, which names that consumer and the overlapping
   slots; nothing changes then.
3. Slots that no one declared have no owner (the dispatcher holds their
   events with reason "no owner" until someone declares them).
4. A leaving consumer's ranges become unowned; nobody inherits them.

It must not know about: events, permits, acks or clocks.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from broker.subscription.selector import RangeChanges, Segment, SegmentSelector, SelectorError
from sdk.core.model import HashRange, RangeError, normalize_ranges


class RangeConflict(SelectorError):
    """A declared range overlaps another consumer's range.

    Attributes:
        consumer: the consumer whose declaration was refused.
        other_consumer: the attached consumer it collides with.
        overlap: the slots both would own.
    """

    def __init__(self, consumer: str, declared: HashRange, other_consumer: str,
                 other_range: HashRange) -> None:
        overlap = HashRange(max(declared.slot_first, other_range.slot_first),
                            min(declared.slot_last, other_range.slot_last))
        super().__init__(
            f"hash range {declared} of consumer {consumer!r} overlaps range {other_range} "
            f"of consumer {other_consumer!r} in slots {overlap}; sticky ranges must not "
            f"overlap: declare slots no other consumer serves"
        )
        self.consumer = consumer
        self.other_consumer = other_consumer
        self.overlap = overlap


class StickySelector(SegmentSelector):
    """Explicit, exclusive hash ranges per consumer; see the module docstring."""

    def add_consumer(
        self, name: str, now_ms: int, ranges: Sequence[HashRange] = ()
    ) -> RangeChanges:
        """Attach `name` serving `ranges`.

        Raises:
            DuplicateConsumer: `name` is attached already.
            SelectorError: no ranges, or the consumer's own ranges overlap.
            RangeConflict: a range overlaps another consumer's.
        """
        self._refuse_duplicate(name)
        if not ranges:
            raise SelectorError(
                f"consumer {name!r} declared no hash range; sticky mode needs at least one "
                f"inclusive range within 0..65535"
            )
        try:
            declared = normalize_ranges(list(ranges), allow_overlap=False)
        except RangeError as error:
            raise SelectorError(f"consumer {name!r}: {error}") from None
        for wanted in declared:
            self._refuse_overlap(name, wanted)
        self._joined_ms[name] = now_ms
        added: list[Segment] = [(r.slot_first, r.slot_last, name) for r in declared]
        return self._replace_segments(sorted(self._segments + added))

    def remove_consumer(self, name: str) -> RangeChanges:
        self._check_known(name)
        del self._joined_ms[name]
        return self._replace_segments([s for s in self._segments if s[2] != name])

    def _refuse_overlap(self, name: str, wanted: HashRange) -> None:
        # The candidate is the last segment starting at or before wanted's last slot;
        # segments are disjoint and sorted, so walk left while they still reach wanted.
        i = bisect_right(self._starts, wanted.slot_last) - 1
        colliding: Segment | None = None
        while i >= 0 and self._segments[i][1] >= wanted.slot_first:
            colliding = self._segments[i]
            i -= 1
        if colliding is not None:
            first, last, owner = colliding
            raise RangeConflict(name, wanted, owner, HashRange(first, last))
