"""Redeliveries: counts, delays and the slots a retry holds back.

Goal: a nacked offset holds its slot at itself while it waits out its delay
and just past itself once it is due, until it is acknowledged (so no later
event of the key overtakes the retry); counts are per offset and travel with
deliveries; `exhausted` says when an offset goes to the dead-letter topic.

Method: worked examples of each rule, then a hypothesis RuleBasedStateMachine
that drives `Redeliveries` and a plain model (dicts of retrying and delayed
offsets with their due times) through nacks, losses, clock steps, acks,
forgets and prunes, and compares `held`, `retrying`, counts, `next_due_ms`
and what `process_due` returns after every step.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from broker.subscription.redelivery import Redeliveries


def test_counts_start_at_zero_and_grow_per_give_back() -> None:
    r = Redeliveries()
    assert r.count(5) == 0
    assert r.counts_of([4, 5]) is None  # all first deliveries: no column at all
    r.process_lost([5, 6])
    r.process_nacked([5], [9], due_ms=100)
    assert r.counts_of([4, 5, 6]) == [0, 2, 1]
    assert r.counts_of([4, 7]) is None
    assert r.held() == {9: 5}  # lost offsets hold nothing; the nacked one holds slot 9


def test_a_delayed_nack_holds_its_slot_at_itself_then_just_past_itself() -> None:
    r = Redeliveries()
    r.process_nacked([10, 12], [3, 3], due_ms=100)
    assert r.held() == {3: 10}
    assert r.delayed_count == 2
    assert r.process_due(99) == ([], [])
    assert r.process_due(100) == ([10, 12], [3, 3])
    assert r.delayed_count == 0
    assert r.held() == {3: 11}  # 10 goes out first; 11 and later wait for its ack
    r.process_acks([(10, 11)])
    assert r.held() == {3: 13}  # 12 is still retrying
    r.process_acks([(12, 13)])
    assert r.held() == {}
    assert dict(r.retrying) == {}


def test_held_takes_the_lowest_offset_per_slot() -> None:
    r = Redeliveries()
    r.process_nacked([20], [1], due_ms=50)
    r.process_nacked([15], [1], due_ms=500)
    r.process_nacked([30], [2], due_ms=50)
    r.process_due(50)  # 20 and 30 are due, 15 is not
    assert r.held() == {1: 15, 2: 31}


def test_process_due_pops_in_due_order_and_next_due_skips_settled_offsets() -> None:
    r = Redeliveries()
    r.process_nacked([7], [0], due_ms=300)
    r.process_nacked([8], [0], due_ms=100)
    r.process_nacked([9], [0], due_ms=200)
    assert r.next_due_ms() == 100
    r.forget(8)  # acknowledged (a late ack) while it waited
    assert r.next_due_ms() == 200
    assert r.process_due(250) == ([9], [0])
    assert r.next_due_ms() == 300
    assert r.process_due(1000) == ([7], [0])
    assert r.next_due_ms() is None


def test_acks_settle_only_offsets_inside_their_ranges() -> None:
    r = Redeliveries()
    r.process_nacked([3, 5, 8, 13], [0, 1, 2, 3], due_ms=0)
    r.process_due(0)
    r.process_acks([(0, 4), (6, 9)])  # half-open: 3 and 8
    assert sorted(r.retrying) == [5, 13]
    r.process_acks([(13, 14)])
    assert sorted(r.retrying) == [5]


def test_exhausted_after_more_give_backs_than_allowed() -> None:
    r = Redeliveries()
    for _ in range(3):
        r.process_nacked([4], [0], due_ms=0)
        r.process_due(0)
    assert not r.exhausted(4, 0)  # 0: never dead-letter
    assert not r.exhausted(4, 3)
    assert r.exhausted(4, 2)
    r.forget(4)
    assert r.count(4) == 0 and not r.exhausted(4, 2)


def test_prune_below_and_clear_forget_settled_offsets() -> None:
    r = Redeliveries()
    r.process_nacked([1, 2, 50], [0, 0, 1], due_ms=10)
    r.process_lost([3])
    r.prune_below(40)
    assert sorted(r.retrying) == [50]
    assert r.counts_of([1, 2, 3, 50]) == [0, 0, 0, 1]
    assert r.held() == {1: 50}
    assert r.process_due(10) == ([50], [1])  # the pruned ones never come due
    r.clear()
    assert r.held() == {} and r.next_due_ms() is None and r.counts_of([50]) is None


OFFSETS = st.integers(0, 40)
SLOTS = st.integers(0, 3)


class RedeliveriesMachine(RuleBasedStateMachine):
    """`Redeliveries` against a model of retrying (offset -> slot) and delayed
    (offset -> due) offsets, under a clock that only moves forward."""

    def __init__(self) -> None:
        super().__init__()
        self.r = Redeliveries()
        self.now = 0
        self.retrying: dict[int, int] = {}
        self.delayed: dict[int, int] = {}
        self.counts: dict[int, int] = {}

    @rule(offsets=st.sets(OFFSETS, min_size=1, max_size=4), slot=SLOTS,
          delay=st.integers(0, 50))
    def nack(self, offsets: set[int], slot: int, delay: int) -> None:
        given = sorted(o for o in offsets if o not in self.delayed)  # held ones are not sent
        if not given:
            return
        due = self.now + delay
        slots = [self.retrying.get(o, slot) for o in given]  # an offset keeps its slot
        self.r.process_nacked(given, slots, due)
        for o, s in zip(given, slots, strict=True):
            self.retrying[o] = s
            self.delayed[o] = due
            self.counts[o] = self.counts.get(o, 0) + 1

    @rule(offsets=st.sets(OFFSETS, max_size=4))
    def lose(self, offsets: set[int]) -> None:
        given = sorted(offsets)
        self.r.process_lost(given)
        for o in given:
            self.counts[o] = self.counts.get(o, 0) + 1

    @rule(step=st.integers(0, 40))
    def tick(self, step: int) -> None:
        self.now += step
        due = sorted(o for o, d in self.delayed.items() if d <= self.now)
        offsets, slots = self.r.process_due(self.now)
        assert sorted(offsets) == due
        assert all(self.retrying[o] == s for o, s in zip(offsets, slots, strict=True))
        for o in due:
            del self.delayed[o]

    @rule(start=OFFSETS, length=st.integers(1, 6))
    def ack(self, start: int, length: int) -> None:
        self.r.process_acks([(start, start + length)])
        for o in range(start, start + length):
            if self.retrying.pop(o, None) is not None:
                self.delayed.pop(o, None)
                self.counts.pop(o, None)

    @rule(offset=OFFSETS)
    def forget(self, offset: int) -> None:
        self.r.forget(offset)
        if self.retrying.pop(offset, None) is not None:
            self.delayed.pop(offset, None)
        self.counts.pop(offset, None)

    @rule(mark=OFFSETS)
    def prune(self, mark: int) -> None:
        self.r.prune_below(mark)
        for table in (self.retrying, self.delayed, self.counts):
            for o in [o for o in table if o < mark]:
                del table[o]

    @invariant()
    def same_answers(self) -> None:
        held: dict[int, int] = {}
        for o, s in self.retrying.items():
            first = o if o in self.delayed else o + 1
            held[s] = min(held.get(s, first), first)
        assert dict(self.r.held()) == held
        assert dict(self.r.retrying) == self.retrying
        assert self.r.delayed_count == len(self.delayed)
        assert self.r.next_due_ms() == (min(self.delayed.values()) if self.delayed else None)
        offsets = list(range(41))
        expected = [self.counts.get(o, 0) for o in offsets]
        assert self.r.counts_of(offsets) == (expected if any(expected) else None)


TestRedeliveriesMachine = RedeliveriesMachine.TestCase
TestRedeliveriesMachine.settings = settings(max_examples=150, stateful_step_count=40,
                                            deadline=None)
