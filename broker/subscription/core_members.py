"""The membership side of the dispatch core: who is attached and who owns which slot.

Job: attach and detach consumers, let the Key_Shared selector move ranges (a
moved slot its old owner still holds unacked events of starts draining: rule
4 of `core.py`), pick Exclusive/Failover's active consumer, and rebuild the
owner table (slot -> owner index) the dispatch reads. It runs once per
membership change, never per event, which is why it can live apart from the
dispatch and read sides without costing the hot path anything.

It is a part of `PartitionCore` (a base class): it reads and changes the
core's state and gives back what a leaving consumer held through the core's
`_give_back`. Pure: no I/O, no clock.
"""

from __future__ import annotations

import copy

import numpy as np
import numpy.typing as npt

from broker.subscription.core_types import Kind, Notice
from broker.subscription.dispatch import pick_active
from broker.subscription.holdings import Taken
from broker.subscription.members import Member, MemberSpec
from broker.subscription.selector import (
    DuplicateConsumer,
    OwnerTable,
    RangeChanges,
    build_owner_table,
)
from broker.subscription.selector_auto_split import AutoSplitSelector
from broker.subscription.selector_consistent import ConsistentHashSelector
from broker.subscription.selector_sticky import StickySelector
from broker.subscription.slot_state import SlotState
from sdk.core.hashing import SLOT_MAX
from sdk.core.model import slot_mask


class MemberSide:
    """See the module docstring; `PartitionCore` provides the state it declares."""

    kind: Kind
    partition: int
    members: dict[str, Member]
    selector: AutoSplitSelector | StickySelector | ConsistentHashSelector | None
    active: str | None
    slots: SlotState
    _notices: list[Notice]
    _owner_table: OwnerTable
    _owners: npt.NDArray[np.uint32]
    _by_index: list[Member | None]

    def _give_back(self, taken: Taken, due_ms: int, now_ms: int) -> None:
        raise NotImplementedError  # PartitionCore's own

    def check_attach(self, spec: MemberSpec, now_ms: int) -> None:
        """Refuse what `process_attach` would refuse, changing nothing.

        Raises:
            SelectorError: the name is taken or the selector refuses the consumer.
        """
        if self.selector is not None:
            trial = copy.deepcopy(self.selector)
            trial.add_consumer(spec.name, now_ms, spec.sticky_ranges)
        elif spec.name in self.members:
            raise DuplicateConsumer(f"consumer {spec.name!r} is already attached")

    def process_attach(self, spec: MemberSpec, now_ms: int) -> None:
        """Attach a consumer. Raises SelectorError (see `check_attach`); nothing changes then."""
        self.check_attach(spec, now_ms)
        member = Member(spec, now_ms)
        if self.selector is not None:
            self._update_rates(now_ms)
            changes = self.selector.add_consumer(spec.name, now_ms, spec.sticky_ranges)
            self.members[spec.name] = member
            self._moved(changes, newcomer=spec.name)
        else:
            self.members[spec.name] = member
            if self.kind != Kind.SHARED:
                self._choose_active(now_ms, newcomer=spec.name)
        self._reindex()

    def process_detach(self, name: str, now_ms: int) -> int:
        """A consumer left (or its stream broke): what it held comes back, first.
        Returns how many events it held."""
        member = self.members.pop(name, None)
        if member is None:
            return 0
        held = member.holding.count
        self.slots.drop_holder(name)
        self._give_back(member.holding.take_all(), now_ms, now_ms)
        if self.selector is not None:
            self._update_rates(now_ms)
            self._moved(self.selector.remove_consumer(name), newcomer=None)
        elif self.kind != Kind.SHARED:
            self._choose_active(now_ms, newcomer=None)
        self._reindex()
        return held

    def _update_rates(self, now_ms: int) -> None:
        if isinstance(self.selector, AutoSplitSelector):
            for name, member in self.members.items():
                self.selector.set_dispatch_rate(name, member.meter.rate(now_ms))

    def _moved(self, changes: RangeChanges, newcomer: str | None) -> None:
        """Drain the moved slots their old owners hold; tell whoever's ranges changed."""
        assert self.selector is not None
        table = self.selector.owner_table()
        for slot, entry in list(self.slots.draining.items()):
            if table.owner_of(slot) == entry[0]:  # moved back to its holder
                self.slots.stop_draining(slot)
        for name in changes.consumers:
            member = self.members.get(name)
            lost = changes.lost_by(name)
            if member is None or not lost or not member.holding.count:
                continue
            held = member.holding.live().slots
            moved = held[np.frombuffer(slot_mask(lost), np.bool_)[held]]
            if len(moved):
                self.slots.start_draining(moved, name)
        told = [n for n in changes.consumers if n in self.members]
        if newcomer is not None and newcomer not in told:
            told.append(newcomer)
        for name in told:
            self._notices.append(Notice(name, ranges=tuple(self.selector.ranges_of(name))))

    def _choose_active(self, now_ms: int, newcomer: str | None) -> None:
        """Exclusive/Failover: pick the active consumer; its predecessor's events move."""
        ranked = [(n, m.spec.priority) for n, m in self.members.items()]
        active = pick_active(ranked, self.partition)
        previous = self.active
        if active != previous:
            old = self.members.get(previous) if previous is not None else None
            if old is not None:  # rewind what the old active holds to the new one
                self._give_back(old.holding.take_all(), now_ms, now_ms)
            self.active = active
        if self.kind == Kind.FAILOVER:
            for name in self.members:
                if active != previous or name == newcomer:
                    self._notices.append(Notice(name, active=name == active))

    def _reindex(self) -> None:
        """Map owner indexes to members after a membership change."""
        if self.selector is not None:
            table = self.selector.owner_table()
        elif self.active is not None:
            table = build_owner_table([(0, SLOT_MAX, self.active)], [self.active])
        else:
            table = build_owner_table([], [])
        self._owner_table = table  # shared with equal ones: kept while in use
        self._owners = np.frombuffer(table.indexes, np.uint32)
        self._owners.flags.writeable = False  # shared: a write would be a bug
        self._by_index = [None] + [self.members[n] for n in table.names[1:] if n is not None]
