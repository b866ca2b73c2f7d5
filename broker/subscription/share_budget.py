"""One broker-wide memory budget divided in equal shares among its members.

Job: keep what many holders of memory (the dispatchers' record caches, the
consumers' outboxes) hold together within one budget, however many there
are. Each member's limit is its *share*: the budget divided equally among
the members, never more than a member's own bound and never less than a
floor. Equal, not on demand, so that a share is known without looking at
the others and no member takes memory from another.

A member never gives memory back here: it only shrinks in its own time (a
cache in its dispatcher's round, an outbox as its stream is written). So the
budget tells members when their share changed in a way that concerns them:
- when members join and the share drops, each member holding more than the
  new share is woken (so it trims, or stops taking more). A join that leaves
  the share as it was (at the floor: past bytes_max / floor members) looks at
  no other member, so opening many streams costs each one a constant;
- when a member leaves and the share grows, each member that said it waits
  for room (`wait_for_room`) is woken (so it takes more again: without it a
  paused outbox under half its new share would wait for a write that never
  comes).

It knows nothing of what the members hold, only how many bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol


class Member(Protocol):
    """What the budget sees of a member: how much it holds."""

    @property
    def bytes(self) -> int: ...


class ShareBudget:
    """See the module docstring. Runs on the event loop."""

    def __init__(self, bytes_max: int, member_bytes_max: int, floor: int = 0) -> None:
        self.bytes_max = bytes_max
        self.member_bytes_max = member_bytes_max
        self.floor = floor
        self._members: dict[Member, Callable[[], None]] = {}
        self._waiting: dict[Member, None] = {}  # ordered set: woken in the order they waited
        self.share = member_bytes_max

    def __len__(self) -> int:
        return len(self._members)

    def join_all(self, joining: Iterable[tuple[Member, Callable[[], None]]]) -> None:
        """Members join, each with the `wake` that makes it look at its share again;
        several together: one look at the others for all of them."""
        self._members.update(joining)
        before = self.share
        self._update()
        if self.share < before:  # else every member over it was woken when it dropped
            share = self.share
            for member, wake_member in list(self._members.items()):
                if member.bytes > share:
                    wake_member()

    def leave(self, member: Member) -> None:
        """A member is gone; the others' shares grow back, and those waiting are woken."""
        if self._members.pop(member, None) is None:
            return
        self._waiting.pop(member, None)
        before = self.share
        self._update()
        if self.share > before:
            for waiting in list(self._waiting):
                self._members[waiting]()

    def wait_for_room(self, member: Member) -> None:
        """`member` stopped taking more: wake it when a share grows."""
        if member in self._members:
            self._waiting[member] = None

    def done_waiting(self, member: Member) -> None:
        """`member` takes more again."""
        self._waiting.pop(member, None)

    def held(self) -> int:
        """Bytes all members hold now (for the metrics and tests)."""
        return sum(member.bytes for member in self._members)

    def _update(self) -> None:
        equal = self.bytes_max // max(1, len(self._members))
        self.share = min(self.member_bytes_max, max(self.floor, equal))


__all__ = ["Member", "ShareBudget"]
