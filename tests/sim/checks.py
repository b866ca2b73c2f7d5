"""The simulation's checks after every step: owners, exact in-flight state, liveness.

Goal: what `model.py` cannot see at a delivery: every slot has exactly one
owner (none twice in sticky mode); what the core holds per consumer, gives
back and keeps waiting is exactly what the model says (so memory is what is
in flight plus the look-ahead limits, never the events read past a waiting
slot); a slot whose owner is healthy and has permits gets an event
within a bounded number of rounds; and a window the broker told a consumer
its share of ends (`Delivery.open_windows`, share_ends.py) gets no more first
deliveries to it while ownership stays as it was.

Method: a base class of `Simulation` (harness.py), reading its core and model.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from broker.subscription.core import CoreLimits, Kind, Mode, PartitionCore, Send
from broker.subscription.share_ends import open_windows
from sdk.core.hashing import SLOT_COUNT
from tests.sim.consumer import SimConsumer
from tests.sim.log import SimLog
from tests.sim.model import Model, Violation


class Checks:
    """See the module docstring; `Simulation` provides the state it declares."""

    core: PartitionCore
    model: Model
    limits: CoreLimits
    kind: Kind
    mode: Mode
    now: int
    consumers: dict[str, SimConsumer]
    waited: dict[int, tuple[int, int]]
    progress: set[int]
    trail: deque[str]
    log: SimLog
    # Ownership's generation: a join, a leave, a seek or a restart may move a window's
    # events to another consumer or send them again; (consumer, window base) -> the
    # generation in which the broker said the consumer's share of the window ended
    owners_epoch: int
    shares_ended: dict[tuple[str, int], int]

    def check_owners(self) -> None:
        """Every slot has exactly one owner (none twice in sticky mode)."""
        selector = self.core.selector
        if selector is None:
            return
        covered = np.zeros(SLOT_COUNT, np.int64)
        for name in self.core.members:
            for r in selector.ranges_of(name):
                covered[r.slot_first:r.slot_last + 1] += 1
        if covered.max(initial=0) > 1:
            raise Violation("a slot has two owners")
        if self.mode != Mode.STICKY and self.core.members and covered.min() != 1:
            raise Violation("a slot has no owner while consumers are attached")

    def check_share_ends(self, sends: list[Send]) -> None:
        """No first delivery of a window whose share the consumer was told had ended, while
        ownership stays as it was; then note what these sends say (as the dispatcher
        would send it: `open_windows` over the same sends, in order). Shared: the broker
        says nothing (`Opened.marks_share_ends` is false), so nothing is checked."""
        if not self.core.keyed:
            return
        for send, opened in zip(sends, open_windows(self.core, self.log, sends), strict=True):
            bases: dict[int, int] = {}
            for offset, count in zip(send.events.offsets.tolist(),
                                     send.events.counts.tolist(), strict=True):
                record = self.log.find(offset)
                assert record is not None
                bases[record.base] = record.end - 1
                ended = self.shares_ended.get((send.consumer, record.base))
                if count == 0 and ended == self.owners_epoch:
                    raise Violation(f"{send.consumer} got offset {offset} of the window at "
                                    f"{record.base}, whose share it was told had ended")
            for base, last in bases.items():
                if last in opened:
                    self.shares_ended.pop((send.consumer, base), None)
                else:
                    self.shares_ended[(send.consumer, base)] = self.owners_epoch

    def check_state(self) -> None:
        """The core holds, gives back and keeps exactly what the model says (memory)."""
        core, model = self.core, self.model
        for name in self.consumers:
            held = set(core.members[name].holding.live().offsets.tolist())
            if held != model.held_by(name):
                raise Violation(f"{name}: the core holds {sorted(held)[:10]}, the model "
                                f"{sorted(model.held_by(name))[:10]}")
        pending = core.pending.events
        again = pending.counts > 0  # given back, read again, waiting in memory
        given = set(core.given_back.offsets.tolist()) | set(pending.offsets[again].tolist())
        given |= set(core._dead_out.offsets.tolist())
        if given != set(model.given_back) | model.dead:
            raise Violation(f"given back: core {sorted(given)[:10]}, model "
                            f"{sorted(set(model.given_back) | model.dead)[:10]}")
        if len(pending) > self.limits.look_ahead_events_max and core.keyed:
            raise Violation(f"{len(pending)} events wait in memory")
        if core.keyed and int(core.pending.per_slot.max()) > self.limits.waiting_slot_events_max:
            raise Violation("a slot keeps more events in memory than allowed")
        for offset in pending.offsets[~again].tolist():
            if model.acked[offset] or offset in model.holder or offset in model.given_back:
                raise Violation(f"offset {offset} waits in memory but is acknowledged, held "
                                f"or given back")
        if len(core.slots.floors) > len({e.slot for e in model.events}) + 1:
            raise Violation("more floors than slots in use")

    def check_liveness(self) -> None:
        """A slot whose owner is healthy and has permits gets an event within a bound: the
        catch-up sweep over the span from the lowest unacknowledged offset or floor when it
        started waiting, twice (it may have just passed it), at one read per round it gets
        (reads alternate with the main read)."""
        model = self.model
        low = min([model.lowest_unacked(), *self.core.slots.floors.values()])
        bound = 4 * ((model.end - low) // self.limits.read_events_max) + 16
        eligible = self._eligible()
        for key, slot in eligible:
            if key in self.progress:
                self.waited.pop(key, None)
                continue
            waited, allowed = self.waited.get(key, (0, bound))
            waited, allowed = waited + 1, max(allowed, bound)
            self.waited[key] = (waited, allowed)
            if waited > allowed:
                raise Violation(f"slot {slot} (owner {self.core.owner_of(slot)}) waited "
                                f"{waited} rounds with permits and nothing in its way "
                                f"(bound {allowed})")
        keys = {k for k, _ in eligible}
        for key in list(self.waited):
            if key not in keys:
                del self.waited[key]

    def _eligible(self) -> list[tuple[int, int]]:
        """(progress key, slot) of every slot that must make progress now."""
        core, model = self.core, self.model
        unacked_max = self.limits.consumer_unacked_events_max
        found = []
        if not model.keyed:
            ready = any(m.available(unacked_max) for m in core.members.values())
            waiting = any(not model.acked[o] and o not in model.holder and o not in model.dead
                          and model.given_back.get(o, 0) <= self.now
                          for o in range(model.end))
            return [(-1, -1)] if ready and waiting else []
        for slot in list(model.slot_offsets):
            offset = model.waiting_of(slot)
            if offset is None or offset in model.dead or \
                    model.given_back.get(offset, 0) > self.now:
                continue
            owner = core.owner_of(slot)
            if owner is None or not core.members[owner].available(unacked_max):
                continue
            if any(c != owner for c in model.slot_holders.get(slot, {})):
                continue  # draining: another consumer holds events of it
            delays = [d for o, d in model.given_back.items()
                      if model.events[o].slot == slot and d > self.now]
            if delays or any(model.events[o].slot == slot for o in model.dead):
                continue
            found.append((slot, slot))
        return found
