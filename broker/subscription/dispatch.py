"""Dispatch planning: which candidate events go to which consumer now. Pure, vectorized.

Job: the decision at the middle of every dispatch round (read -> plan ->
send), for a whole batch of candidates at once with numpy, and Failover's
choice of the active consumer.

Rules of `plan_keyed` (Key_Shared, and Exclusive/Failover with every slot
owned by the active consumer):
1. Candidates are parallel arrays in *candidate order*: each slot's events
   ascend and come before that slot's events not yet candidates.
2. An event goes to the owner of its slot (the owner table maps a slot to
   an owner index; 0 is no owner), unless its slot is blocked (draining,
   waiting out a nack delay, dead-lettering) or its owner is out of permits.
3. Each owner gets at most its permits: the first ones of its candidates
   in candidate order. So what a slot sends is always a prefix of its
   candidates (every reason to wait is per slot, or per owner and a cut
   of the owner's candidates in order), and per-key order holds.
4. The plan is one pass of C when the native module was built
   (`_keyed_plan.c`; broker/native.py says when it is used). In Python, work
   is a fixed number of numpy calls per plan, none per event in Python; but a
   plan of a few candidates (`SMALL_PLAN_EVENTS`, following the tail) is one
   Python step per candidate, cheaper than the numpy calls' fixed cost.

`plan_shared` spreads a count of candidates over consumers by permits,
round-robin from where the last plan stopped; no order, no key affinity.

It must not know about the log, the cursor, clocks or gRPC.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from broker import native
from sdk.core.hashing import SLOT_COUNT

FLOORED = 1  # the slot waits: its events from its floor on are read again later
DRAINING = 2  # a consumer other than the slot's owner holds unacked events of it
DELAYED = 4  # an event of the slot waits out a nack delay
DEAD_LETTERING = 8  # an event of the slot is on its way to the dead-letter topic
BLOCKING = DRAINING | DELAYED | DEAD_LETTERING
SMALL_PLAN_EVENTS = 32  # plans of at most this many candidates run in Python (rule 4)
_PLAN_VERSION = 1  # PLAN_VERSION in _keyed_plan.c
_native = native.load("broker.subscription._keyed_plan", _PLAN_VERSION)


class WaitReason(IntEnum):
    """Why a slot's events wait (for stats and "why is this key blocked")."""

    NO_OWNER = 1  # no consumer serves the slot (sticky gaps, no consumers)
    DRAINING = 2  # another consumer still holds unacked events of it
    HELD = 3  # a nacked event of it waits out its delay, or goes to the dead-letter topic
    NO_PERMITS = 4  # its owner has no permit left (or is paused, or holds its unacked limit)
    CATCHING_UP = 5  # it may deliver: its events are being read again from the log


@dataclass(frozen=True, slots=True)
class KeyedPlan:
    """What goes out now: `positions` of the sent candidates, grouped by owner in owner
    index order (candidate order within an owner), and `bounds` so that owner
    `owners[k]` gets positions[bounds[k]:bounds[k + 1]]."""

    positions: npt.NDArray[np.intp]
    owners: npt.NDArray[np.intp]
    bounds: npt.NDArray[np.intp]


def plan_keyed(slots: npt.NDArray[np.int32], owner_of_slot: npt.NDArray[np.uint32],
               flags: npt.NDArray[np.uint8], permits: npt.NDArray[np.int64]) -> KeyedPlan:
    """Split candidates between their slots' owners (see rules 1-4).

    Args:
        slots: each candidate's slot, in candidate order.
        owner_of_slot: 65,536 owner indexes (0 = no owner).
        flags: 65,536 slot flags; a BLOCKING flag keeps a slot's events back.
        permits: permits left per owner index (entry 0 unused).
    """
    assert len(owner_of_slot) == SLOT_COUNT and len(flags) == SLOT_COUNT
    if _native is not None and _native_readable(slots, owner_of_slot, flags, permits):
        positions, owners, bounds = _native.plan(np.ascontiguousarray(slots), owner_of_slot,
                                                 flags, permits, BLOCKING)
        return KeyedPlan(np.frombuffer(positions, np.intp), np.frombuffer(owners, np.intp),
                         np.frombuffer(bounds, np.intp))
    if len(slots) <= SMALL_PLAN_EVENTS:
        return _plan_keyed_small(slots, owner_of_slot, flags, permits)
    return _plan_keyed_vectorized(slots, owner_of_slot, flags, permits)


def _native_readable(slots: npt.NDArray[np.int32], owner_of_slot: npt.NDArray[np.uint32],
                     flags: npt.NDArray[np.uint8], permits: npt.NDArray[np.int64]) -> bool:
    """Whether the C plan takes these arrays (slots once made contiguous; the core's
    tables are contiguous as made); other types are planned in Python."""
    return (slots.dtype == np.int32 and owner_of_slot.dtype == np.uint32
            and flags.dtype == np.uint8 and permits.dtype == np.int64
            and owner_of_slot.flags.c_contiguous and flags.flags.c_contiguous
            and permits.flags.c_contiguous)


def _plan_keyed_vectorized(slots: npt.NDArray[np.int32], owner_of_slot: npt.NDArray[np.uint32],
                           flags: npt.NDArray[np.uint8], permits: npt.NDArray[np.int64]
                           ) -> KeyedPlan:
    """`plan_keyed` in numpy: a fixed number of calls whatever the number of candidates."""
    # take, not [...]: several times faster on these sizes; owners as 16-bit keys so the
    # stable argsort is a radix sort; ranks within an owner from counts, not a search
    owner = owner_of_slot.take(slots)
    ok = (owner != 0) & ((flags.take(slots) & BLOCKING) == 0) & (permits.take(owner) > 0)
    eligible = ok.nonzero()[0]
    key = owner.take(eligible).astype(np.uint16 if len(permits) <= 1 << 16 else np.int64)
    order = key.argsort(kind="stable")
    grouped = key.take(order).astype(np.intp)
    counts = np.bincount(grouped, minlength=len(permits))
    group_start = counts.cumsum() - counts
    rank = np.arange(len(grouped)) - group_start.take(grouped)
    sent = rank < permits.take(grouped)
    positions = eligible.take(order[sent])
    sent_owners = grouped[sent]
    if not len(sent_owners):
        empty = np.zeros(0, np.intp)
        return KeyedPlan(empty, empty, np.zeros(1, np.intp))
    starts = np.concatenate(([True], sent_owners[1:] != sent_owners[:-1])).nonzero()[0]
    return KeyedPlan(positions, sent_owners[starts],
                     np.concatenate((starts, [len(sent_owners)])).astype(np.intp))


def _plan_keyed_small(slots: npt.NDArray[np.int32], owner_of_slot: npt.NDArray[np.uint32],
                      flags: npt.NDArray[np.uint8], permits: npt.NDArray[np.int64]) -> KeyedPlan:
    """`plan_keyed` of a few candidates (following the tail), one Python step each: the
    same rules, without the fixed cost of two dozen numpy calls on tiny arrays."""
    left = permits.tolist()
    by_owner: dict[int, list[int]] = {}
    # two gathers and Python ints: indexing the arrays an event at a time costs more
    candidates = zip(owner_of_slot.take(slots).tolist(), flags.take(slots).tolist(),
                     strict=True)
    for position, (owner, flag) in enumerate(candidates):
        if owner and left[owner] > 0 and not flag & BLOCKING:
            left[owner] -= 1
            if owner in by_owner:
                by_owner[owner].append(position)
            else:
                by_owner[owner] = [position]
    owners = sorted(by_owner)
    positions: list[int] = []
    bounds = [0]
    for owner in owners:
        positions += by_owner[owner]
        bounds.append(len(positions))
    return KeyedPlan(np.array(positions, np.intp), np.array(owners, np.intp),
                     np.array(bounds, np.intp))


def plan_shared(count: int, consumers: Sequence[str], permits: Sequence[int],
                next_index: int) -> tuple[list[tuple[str, int]], int]:
    """Shared: hand `count` candidates out by permits, round-robin.

    Each pass gives every consumer with permits left an even share of what
    is left (capped by its permits), starting at `next_index`, until
    candidates or permits run out. Returns ([(consumer, how many)] in
    hand-out order, the index to start from next time); consecutive
    candidates go to one consumer, so each gets contiguous runs.
    """
    n = len(consumers)
    if not n or not count:
        return [], next_index
    order = [(next_index + k) % n for k in range(n)]
    left = {i: max(0, permits[i]) for i in order}
    granted = dict.fromkeys(order, 0)
    remaining = count
    active = [i for i in order if left[i] > 0]
    last_served: int | None = None
    while remaining and active:
        share = max(1, remaining // len(active))
        still_open: list[int] = []
        for i in active:
            if remaining == 0:
                break
            give = min(share, left[i], remaining)
            granted[i] += give
            left[i] -= give
            remaining -= give
            last_served = i
            if left[i]:
                still_open.append(i)
        active = still_open
    handed = [(consumers[i], granted[i]) for i in order if granted[i]]
    following = next_index if last_served is None else (last_served + 1) % n
    return handed, following


def pick_active(consumers: Sequence[tuple[str, int]], partition: int) -> str | None:
    """Failover: the active consumer of `partition` among (name, priority) pairs.

    Pulsar's rule: sort by priority ascending (0 is the highest), then name;
    keep the highest priority level; active = sorted[partition % n].
    None when there is no consumer.
    """
    if not consumers:
        return None
    ranked = sorted(consumers, key=lambda consumer: (consumer[1], consumer[0]))
    top = [name for name, priority in ranked if priority == ranked[0][1]]
    return top[partition % len(top)]
