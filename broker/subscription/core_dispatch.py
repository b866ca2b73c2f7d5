"""The dispatch side of the core: which candidates go to whom now, and what waits where.

Job: rules 1-3 and 7 of `core.py` for one batch of candidates (the events
waiting in memory that may go now, then what a read brought): plan them
(`dispatch.plan_keyed`, or round-robin for Shared), put what was sent in the
consumers' holdings, and keep what waits in memory as far as the look-ahead
limits allow; the rest waits on a floor (or, given back before, goes back to
`GivenBack`).

It is a part of `PartitionCore` (a base class). Pure: no I/O, no clock.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from broker.subscription.core_types import CoreLimits, Send
from broker.subscription.dispatch import BLOCKING, plan_keyed, plan_shared
from broker.subscription.given_back import GivenBack
from broker.subscription.holdings import EMPTY, I64, Taken, concat, pick
from broker.subscription.members import Member, RateMeter, permit_array
from broker.subscription.pending import Pending
from broker.subscription.slot_state import SlotState


class DispatchSide:
    """See the module docstring; `PartitionCore` provides the state it declares."""

    position: int
    limits: CoreLimits
    slots: SlotState
    given_back: GivenBack
    pending: Pending
    members: dict[str, Member]
    meter: RateMeter
    dirty: bool
    _by_index: list[Member | None]
    _owners: npt.NDArray[np.uint32]
    _shared_next: int
    _last_send: int
    _sends: list[Send]

    @property
    def keyed(self) -> bool:
        raise NotImplementedError

    def dispatch(self, now_ms: int) -> None:
        """Send what waits in memory and may go now (after permits, acks, ticks)."""
        if not len(self.pending):
            return
        self._dispatch(EMPTY, now_ms)

    def _dispatch(self, fresh: Taken, now_ms: int) -> None:
        """Candidates = the pending events that may go now, then `fresh` (rules 1-3)."""
        permits = permit_array(self._by_index, self.limits.consumer_unacked_events_max)
        ready = self._ready_pending(permits)
        candidates = concat([ready, fresh])
        if not len(candidates):
            return
        # ascending candidates give ascending sends (each a subset in candidate order):
        # checked once here, not on every send (count_nonzero: C, where `all` is not)
        offsets = candidates.offsets
        ascending = len(offsets) < 2 or not np.count_nonzero(offsets[1:] <= offsets[:-1])
        if self.keyed:
            sent = self._send_keyed(candidates, permits, now_ms, ascending)
        else:
            sent = self._send_shared(candidates, now_ms, ascending)
        self._wait(candidates, sent)

    def _ready_pending(self, permits: I64) -> Taken:
        events = self.pending.events
        if not len(events):
            return EMPTY
        if not self.keyed:
            unacked_max = self.limits.consumer_unacked_events_max
            wanted = any(m.available(unacked_max) for m in self.members.values())
            return self.pending.take_all() if wanted else EMPTY
        if not permits.any():
            return EMPTY
        owner = self._owners[events.slots].astype(np.intp)
        ready = (owner != 0) & (permits[owner] > 0) & \
            ((self.slots.flags[events.slots] & BLOCKING) == 0)
        return self.pending.take(ready.nonzero()[0])

    def _send_keyed(self, candidates: Taken, permits: I64, now_ms: int, ascending: bool
                    ) -> npt.NDArray[np.bool_]:
        plan = plan_keyed(candidates.slots, self._owners, self.slots.flags, permits)
        owners = plan.owners.tolist()
        if len(owners) == 1 and len(plan.positions) == len(candidates):  # all to one owner
            member = self._by_index[owners[0]]
            assert member is not None
            self._send(member, candidates, now_ms, ascending)  # in candidate order: the plan's
            return np.ones(len(candidates), np.bool_)
        sent = np.zeros(len(candidates), np.bool_)
        sent[plan.positions] = True
        bounds = plan.bounds.tolist()
        for k, owner in enumerate(owners):
            member = self._by_index[owner]
            assert member is not None
            self._send(member, pick(candidates, plan.positions[bounds[k]:bounds[k + 1]]), now_ms,
                       ascending)
        return sent

    def _send_shared(self, candidates: Taken, now_ms: int, ascending: bool
                     ) -> npt.NDArray[np.bool_]:
        names = list(self.members)
        unacked_max = self.limits.consumer_unacked_events_max
        handed, self._shared_next = plan_shared(
            len(candidates), names, [self.members[n].available(unacked_max) for n in names],
            self._shared_next)
        sent = np.zeros(len(candidates), np.bool_)
        position = 0
        for name, count in handed:
            positions = np.arange(position, position + count)
            sent[positions] = True
            self._send(self.members[name], pick(candidates, positions), now_ms, ascending)
            position += count
        return sent

    def _send(self, member: Member, events: Taken, now_ms: int, ascending: bool) -> None:
        """Put `events` (in candidate order; `ascending`: so in offset order) in the
        member's holding, in offset order, as one send."""
        if not ascending and len(events.offsets) > 1 and \
                not bool((events.offsets[1:] > events.offsets[:-1]).all()):
            order = events.offsets.argsort(kind="stable")
            events = Taken(events.offsets[order], events.slots[order], events.counts[order])
        n = len(events.offsets)
        self._last_send += 1
        member.holding.add(events, now_ms, self._last_send)
        member.permits -= n
        member.delivered += n
        member.meter.add(n, now_ms)
        self.meter.add(n, now_ms)
        timeout = member.spec.ack_timeout_ms
        if timeout and member.next_timeout_ms is None:
            member.next_timeout_ms = now_ms + timeout
        self._sends.append(Send(member.name, events, self._last_send))
        self.dirty = True

    def _wait(self, candidates: Taken, sent: npt.NDArray[np.bool_]) -> None:
        """Keep what waits in memory as far as it fits; the rest waits on a floor (or,
        given back before, goes back to `GivenBack`)."""
        if np.count_nonzero(sent) == len(sent):
            return
        waiting = pick(candidates, (~sent).nonzero()[0])
        limits = self.limits
        if not self.keyed:  # bounded by demand: Shared reads only what consumers asked for
            self.pending.admit(waiting, len(waiting) + 1, len(self.pending) + len(waiting))
            return
        _, refused = self.pending.admit(waiting, limits.waiting_slot_events_max,
                                        self._look_ahead_max())
        if not len(refused):
            return
        again = refused.counts > 0
        if again.any():  # given back before: given back still, and their slots wait for them
            back = pick(refused, again.nonzero()[0])
            self.given_back.add(back, 0)
            self.slots.lower_floors(back.slots, np.full(len(back), self.position, np.int64))
        fresh = pick(refused, (~again).nonzero()[0])
        if len(fresh):
            self.slots.lower_floors(fresh.slots, fresh.offsets)
            self.slots.count_past_floor(fresh.slots)

    def _look_ahead_max(self) -> int:
        asked = [m.spec.look_ahead_max for m in self.members.values() if m.spec.look_ahead_max]
        return min([self.limits.look_ahead_events_max, *asked])
