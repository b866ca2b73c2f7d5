"""The budget of every consumer's outbox: equal shares, and a running total.

Job: bound what all Subscribe streams of a broker hold queued by
`consumer_outbox_broker_bytes_max` itself, not only by its equal shares.
Shares alone (`share_budget.py`) bound each stream by the share it filled
under, which drops only as later streams open: streams that stall one by
one, each filling before the next opens, held the sum of those shares
(the budget times 1 + 1/2 + ... + 1/n; 3.7 times it at the defaults). So
the sessions also keep a running total here (`held_bytes`, a few additions
a message), and a session pauses once the total passes the budget as it does
past its share (`consumer_state.py`): a stream that opens when the budget is
held takes one round's sends and waits, stalled or not, until its own writes
bring it under half its share.

What a session counts is what the broker holds for it: the messages queued,
and the one gRPC is writing twice, since gRPC copies a message into its own
buffer and the servicer's bytes live until the write completes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from broker.subscription.share_budget import Member, ShareBudget


class OutboxBudget(ShareBudget):
    """See the module docstring. Runs on the event loop."""

    def __init__(self, bytes_max: int, member_bytes_max: int, floor: int = 0) -> None:
        super().__init__(bytes_max, member_bytes_max, floor)
        self.held_bytes = 0  # what every member holds: members add and take away their own

    def join_all(self, joining: Iterable[tuple[Member, Callable[[], None]]]) -> None:
        joining = list(joining)
        self.held_bytes += sum(member.bytes for member, _ in joining if member not in self._members)
        super().join_all(joining)

    def leave(self, member: Member) -> None:
        if member in self._members:
            self.held_bytes -= member.bytes
        super().leave(member)

    def held(self) -> int:
        return self.held_bytes


__all__ = ["OutboxBudget"]
