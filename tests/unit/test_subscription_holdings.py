"""The core's containers: Holding, GivenBack, Pending and SlotState.

Goal: a consumer's `Holding` answers like a dict of offsets under adds (in
and out of order), range takes, expiries and take-alls, and compacts without
losing anything; `GivenBack` keeps offsets sorted with their counts and due
times; `Pending.admit` keeps a prefix of each slot's run within the per-slot
and total limits and refuses the rest; `SlotState` keeps floors (min wins,
raised explicitly), draining counts, delays and dead-letter counts per slot.

Method: a hypothesis RuleBasedStateMachine comparing `Holding` with a dict
model; a hypothesis property for `Pending.admit`; worked examples.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from broker.subscription.array_ops import add_slot_counts, distinct, slot_counts
from broker.subscription.dispatch import DELAYED, DRAINING, FLOORED
from broker.subscription.given_back import GivenBack
from broker.subscription.holdings import Holding, Taken, concat
from broker.subscription.pending import Pending
from broker.subscription.slot_state import SlotState


def taken(offsets: list[int], slots: list[int] | None = None,
          counts: list[int] | None = None) -> Taken:
    n = len(offsets)
    return Taken(np.array(offsets, np.int64),
                 np.array(slots if slots is not None else [o % 7 for o in offsets], np.int32),
                 np.array(counts if counts is not None else [0] * n, np.int32))


class HoldingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.holding = Holding()
        self.model: dict[int, int] = {}  # offset -> sent ms (each add is send `sent ms`)
        self.next_offset = 0
        self.now = 0

    @rule(n=st.integers(1, 30), back=st.booleans())
    def add(self, n: int, back: bool) -> None:
        self.now += 1
        if back:  # below what is held: a catch-up delivery
            free = [o for o in range(self.next_offset) if o not in self.model][:n]
            offsets = sorted(free)
        else:
            offsets = list(range(self.next_offset, self.next_offset + n))
            self.next_offset += n
        self.holding.add(taken(offsets), self.now, send=self.now)
        self.model.update(dict.fromkeys(offsets, self.now))

    @rule(data=st.data())
    def take_ranges(self, data: st.DataObject) -> None:
        cuts = sorted(set(data.draw(st.lists(st.integers(0, self.next_offset + 3), max_size=16))))
        starts = np.array(cuts[0::2][:len(cuts) // 2], np.int64)
        stops = np.array(cuts[1::2], np.int64)
        got = self.holding.take_ranges(starts, stops)
        expected = sorted(o for o in self.model
                          if any(a <= o < b for a, b in zip(starts, stops, strict=True)))
        assert got.offsets.tolist() == expected
        assert got.slots.tolist() == [o % 7 for o in expected]
        for offset in expected:
            del self.model[offset]

    @rule(data=st.data())
    def take_sent(self, data: st.DataObject) -> None:
        """Whole record parts: (send, start, stop) triples, one or several, any order."""
        drawn = data.draw(st.lists(st.tuples(st.integers(0, self.now + 1),
                                             st.integers(0, self.next_offset + 3),
                                             st.integers(1, 40)), min_size=1, max_size=6))
        triples = [(send, start, start + length) for send, start, length in drawn]
        sends, starts, stops = (np.array(column, np.int64) for column in zip(*triples, strict=True))
        got = self.holding.take_sent(sends, starts, stops)
        expected = sorted(o for o, send in self.model.items()
                          if any(s == send and a <= o < b for s, a, b in triples))
        assert got.offsets.tolist() == expected
        for offset in expected:
            del self.model[offset]

    @rule(age=st.integers(0, 5))
    def expire(self, age: int) -> None:
        got = self.holding.take_expired(self.now, age)
        expected = sorted(o for o, t in self.model.items() if t + age <= self.now)
        assert got.offsets.tolist() == expected
        for offset in expected:
            del self.model[offset]

    @rule(stop=st.integers(0, 200))
    def take_below(self, stop: int) -> None:
        got = self.holding.take_below(stop)
        expected = sorted(o for o in self.model if o < stop)
        assert got.offsets.tolist() == expected
        for offset in expected:
            del self.model[offset]

    @invariant()
    def same(self) -> None:
        assert self.holding.count == len(self.model)
        assert self.holding.live().offsets.tolist() == sorted(self.model)
        oldest = self.holding.oldest_sent_ms()
        assert oldest == (min(self.model.values()) if self.model else None)
        assert self.holding.first_offset() == (min(self.model) if self.model else None)


TestHoldingMachine = HoldingMachine.TestCase
TestHoldingMachine.settings = settings(max_examples=80, stateful_step_count=30, deadline=None)


def test_a_holding_compacts_and_grows_past_its_first_buffers() -> None:
    """Thousands of adds and takes: the buffers grow, compact and start over when empty."""
    holding = Holding()
    model: set[int] = set()
    for send in range(1, 400):
        offsets = list(range(send * 10, send * 10 + 9))
        holding.add(taken(offsets), send, send)
        model.update(offsets)
        if send % 3:  # ack most of what the send before carried
            got = holding.take_sent(np.array([send - 1]), np.array([(send - 1) * 10]),
                                    np.array([(send - 1) * 10 + 7]))
            model.difference_update(got.offsets.tolist())
        assert holding.count == len(model)
    assert holding.live().offsets.tolist() == sorted(model)
    holding.take_all()
    assert holding.count == 0 and holding.first_offset() is None
    holding.add(taken([5, 6]), 0, 1)  # below everything held before: fine once empty
    assert holding.live().offsets.tolist() == [5, 6]


def test_slot_counts_are_np_unique_and_np_add_at_for_few_and_many() -> None:
    rng = np.random.default_rng(5)
    for n in (0, 7, 383, 384, 5000):  # below and from the bincount threshold
        slots = rng.integers(0, 65536 if n > 100 else 50, n).astype(np.int32)
        values, counts = slot_counts(slots)
        expected_values, expected_counts = np.unique(slots, return_counts=True)
        assert values.tolist() == expected_values.tolist()
        assert counts.tolist() == expected_counts.tolist()
        per_slot = np.full(65536, 3, np.int32)
        add_slot_counts(per_slot, slots, 1)
        expected = np.full(65536, 3, np.int32)
        np.add.at(expected, slots, 1)
        assert (per_slot == expected).all() and per_slot.dtype == np.int32
        add_slot_counts(per_slot, slots, -1)
        assert (per_slot == 3).all()


def test_distinct_is_np_unique() -> None:
    rng = np.random.default_rng(3)
    for n in (0, 1, 5, 300):
        values = rng.integers(0, 40, n)
        assert distinct(values).tolist() == np.unique(values).tolist()


def test_take_all_and_concat() -> None:
    holding = Holding()
    holding.add(taken([3, 4, 9]), 0)
    assert holding.take_all().offsets.tolist() == [3, 4, 9] and holding.count == 0
    assert len(concat([taken([]), taken([1])])) == 1 and len(concat([])) == 0


def test_given_back_keeps_offsets_sorted_with_counts_and_due() -> None:
    given = GivenBack()
    given.add(taken([7, 3], counts=[1, 2]), 100)
    given.add(taken([5], counts=[1]), 50)
    assert given.offsets.tolist() == [3, 5, 7] and given.counts.tolist() == [2, 1, 1]
    assert given.due_ms.tolist() == [100, 50, 100] and given.first_due_ms() == 50
    assert given.take_between(4, 8).offsets.tolist() == [5, 7]
    assert len(given) == 1
    given.clear()
    assert len(given) == 0 and given.first_due_ms() is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=30), st.integers(1, 4), st.integers(0, 12),
       st.lists(st.integers(0, 4), max_size=6))
def test_pending_admits_a_prefix_of_each_slot_within_limits(
        slots: list[int], slot_max: int, total_max: int, already: list[int]) -> None:
    pending = Pending()
    pending.admit(taken(list(range(100, 100 + len(already))), already), 100, 100)
    offsets = list(range(len(slots)))
    kept, refused = pending.admit(taken(offsets, slots), slot_max, total_max)
    assert len(pending) <= max(total_max, len(already))
    for slot in set(slots):
        mine = [i for i, s in enumerate(slots) if s == slot]
        admitted = [i for i in mine if kept[i]]
        assert admitted == mine[:len(admitted)]  # a prefix of the slot's run
        assert pending.per_slot[slot] == already.count(slot) + len(admitted)
        assert pending.per_slot[slot] <= max(slot_max, already.count(slot))
    assert sorted(refused.offsets.tolist() + [i for i in offsets if kept[i]]) == offsets


def test_pending_takes_by_position_and_slot() -> None:
    pending = Pending()
    pending.admit(taken([1, 2, 3, 4], [5, 6, 5, 6]), 10, 10)
    mask = np.zeros(65536, np.bool_)
    mask[5] = True
    assert pending.take_slots(mask).offsets.tolist() == [1, 3]
    assert pending.per_slot[5] == 0 and pending.per_slot[6] == 2
    assert pending.take_all().offsets.tolist() == [2, 4] and len(pending) == 0


def test_slot_state_floors_draining_delays_and_dead_letters() -> None:
    state = SlotState()
    state.lower_floors(np.array([3, 3, 4], np.int32), np.array([9, 7, 20], np.int64))
    assert state.floors == {3: 7, 4: 20} and state.flags[3] & FLOORED
    state.lower_floors(np.array([3], np.int32), np.array([8], np.int64))  # min wins
    assert state.floors[3] == 7
    state.raise_floor(3, 12)
    assert state.floor_arrays()[1].tolist() == [12, 20]
    state.count_past_floor(np.array([3, 3], np.int32))
    state.count_past_floor(np.array([3], np.int32), -1)
    assert state.floor_events == {3: 1}
    state.unfloor(3)
    assert 3 not in state.floors and not state.flags[3] & FLOORED

    state.start_draining(np.array([5, 5, 6], np.int32), "a")
    assert state.draining == {5: ["a", 2], 6: ["a", 1]} and state.flags[5] & DRAINING
    state.release_held(np.array([5], np.int32), "b")  # not b's to release
    state.release_held(np.array([5, 5], np.int32), "a")
    assert 5 not in state.draining and not state.flags[5] & DRAINING
    state.drop_holder("a")
    assert state.draining == {}

    state.delay(np.array([8], np.int32), 100)
    state.delay(np.array([8], np.int32), 50)  # the latest due time stays
    assert state.next_due_ms() == 100 and state.flags[8] & DELAYED
    assert not state.process_due(99) and state.process_due(100)
    assert not state.flags[8] & DELAYED and state.next_due_ms() is None

    state.dead_letter(np.array([9, 9], np.int32), +1)
    state.dead_letter(np.array([9], np.int32), -1)
    assert state.dead_lettering == {9: 1}
    state.reset()
    assert state.dead_lettering == {} and not state.flags.any()


def test_take_sent_takes_one_send_within_its_span() -> None:
    holding = Holding()
    holding.add(taken([1, 3, 5]), 0, send=7)
    holding.add(taken([2, 4, 9]), 0, send=8)  # interleaved with send 7: a catch-up send
    got = holding.take_sent(np.array([7], np.int64), np.array([1], np.int64),
                            np.array([6], np.int64))
    assert got.offsets.tolist() == [1, 3, 5]  # not 2 and 4: they came in send 8
    both = holding.take_sent(np.array([8, 8], np.int64), np.array([4, 0], np.int64),
                             np.array([10, 5], np.int64))  # out of order, overlapping
    assert both.offsets.tolist() == [2, 4, 9] and holding.count == 0
    assert len(holding.take_sent(np.array([8], np.int64), np.array([0], np.int64),
                                 np.array([10], np.int64))) == 0
