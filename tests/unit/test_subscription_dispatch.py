"""Dispatch planning: plan_keyed, plan_shared and pick_active.

Goal: a keyed plan never exceeds an owner's permits, sends a prefix of every
slot's candidates (so per-key order holds), keeps blocked slots and slots
without an owner back, and gives each owner its first candidates in candidate
order; Shared spreads by permits round-robin; Failover picks the active
consumer as Pulsar does.

Method: worked examples with real selectors' owner tables, and a hypothesis
property of `plan_keyed` over random owner maps, flags and permits against a
plain Python reading of the rules.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.subscription import dispatch
from broker.subscription.dispatch import (
    BLOCKING,
    DELAYED,
    DRAINING,
    FLOORED,
    pick_active,
    plan_keyed,
    plan_shared,
)
from broker.subscription.selector_sticky import StickySelector
from sdk.core.hashing import SLOT_COUNT
from sdk.core.model import HashRange


def owners_of(**ranges: tuple[int, int]) -> tuple[np.ndarray, tuple[str | None, ...]]:
    selector = StickySelector()
    for name, (first, last) in ranges.items():
        selector.add_consumer(name, 0, [HashRange(first, last)])
    table = selector.owner_table()
    return np.frombuffer(table.indexes, np.uint32), table.names


def sends(slots: list[int], owners: np.ndarray, names: tuple[str | None, ...],
          permits: dict[str, int], flags: np.ndarray | None = None) -> dict[str, list[int]]:
    flags = np.zeros(SLOT_COUNT, np.uint8) if flags is None else flags
    per_owner = np.array([0] + [permits.get(n or "", 0) for n in names[1:]], np.int64)
    plan = plan_keyed(np.array(slots, np.int32), owners, flags, per_owner)
    return {str(names[o]): plan.positions[plan.bounds[k]:plan.bounds[k + 1]].tolist()
            for k, o in enumerate(plan.owners.tolist())}


def test_events_go_to_slot_owners_within_permits() -> None:
    owners, names = owners_of(a=(0, 99), b=(100, 199))
    assert sends([5, 150, 6, 7, 151], owners, names, {"a": 2, "b": 5}) == \
        {"a": [0, 2], "b": [1, 4]}


def test_no_owner_and_blocked_slots_wait() -> None:
    owners, names = owners_of(a=(0, 99))
    flags = np.zeros(SLOT_COUNT, np.uint8)
    flags[7] = DRAINING
    flags[8] = FLOORED  # a floor alone does not block what is already a candidate
    assert sends([5, 7, 300, 8, 6], owners, names, {"a": 10}, flags) == {"a": [0, 3, 4]}
    flags[5] = DELAYED
    assert sends([5, 6], owners, names, {"a": 10}, flags) == {"a": [1]}


def test_an_empty_plan() -> None:
    owners, names = owners_of(a=(0, 99))
    assert sends([5, 6], owners, names, {"a": 0}) == {}
    assert sends([], owners, names, {"a": 3}) == {}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 7), max_size=40), st.lists(st.integers(0, 3), min_size=8,
                                                           max_size=8),
       st.lists(st.integers(0, 5), min_size=4, max_size=4),
       st.sets(st.integers(0, 7), max_size=3))
def test_plan_matches_the_rules(slots: list[int], owner_of: list[int], permits: list[int],
                                blocked: set[int]) -> None:
    owners = np.zeros(SLOT_COUNT, np.uint32)
    owners[:8] = owner_of
    flags = np.zeros(SLOT_COUNT, np.uint8)
    for slot in blocked:
        flags[slot] = DELAYED
    left = [0, *permits[1:]]
    expected: dict[int, list[int]] = {}
    for i, slot in enumerate(slots):  # the rules, read naively
        owner = owner_of[slot]
        if owner and slot not in blocked and left[owner] > 0:
            left[owner] -= 1
            expected.setdefault(owner, []).append(i)
    plan = plan_keyed(np.array(slots, np.int32), owners, flags, np.array([0, *permits[1:]]))
    got = {o: plan.positions[plan.bounds[k]:plan.bounds[k + 1]].tolist()
           for k, o in enumerate(plan.owners.tolist())}
    assert got == expected
    for slot in set(slots):  # what a slot sends is a prefix of its candidates
        mine = [i for i, s in enumerate(slots) if s == slot]
        sent = sorted(i for positions in got.values() for i in positions if slots[i] == slot)
        assert sent == mine[:len(sent)]
    assert BLOCKING & FLOORED == 0


def test_shared_spreads_round_robin_by_permits() -> None:
    handed, following = plan_shared(10, ["a", "b", "c"], [4, 4, 1], 0)
    assert handed == [("a", 4), ("b", 4), ("c", 1)] and following == 2  # after b, served last
    handed, following = plan_shared(3, ["a", "b", "c"], [5, 5, 5], 1)
    assert handed == [("b", 1), ("c", 1), ("a", 1)] and following == 1
    assert plan_shared(0, ["a"], [3], 0) == ([], 0)
    assert plan_shared(5, [], [], 0) == ([], 0)


def test_pick_active_follows_pulsar() -> None:
    assert pick_active([], 0) is None
    consumers = [("b", 0), ("a", 0), ("z", 1)]
    assert pick_active(consumers, 0) == "a"
    assert pick_active(consumers, 1) == "b"  # partition % consumers at the top priority
    assert pick_active([("x", 2), ("y", 1)], 0) == "y"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 7), max_size=24), st.lists(st.integers(0, 3), min_size=8,
                                                           max_size=8),
       st.lists(st.integers(0, 5), min_size=4, max_size=4),
       st.sets(st.integers(0, 7), max_size=3))
def test_small_plans_equal_the_vectorized_plan(slots: list[int], owner_of: list[int],
                                               permits: list[int], blocked: set[int]) -> None:
    """A few candidates are planned in Python: the same plan, array for array."""
    owners = np.zeros(SLOT_COUNT, np.uint32)
    owners[:8] = owner_of
    flags = np.zeros(SLOT_COUNT, np.uint8)
    for slot in blocked:
        flags[slot] = DELAYED
    args = (np.array(slots, np.int32), owners, flags, np.array([0, *permits[1:]], np.int64))
    small = dispatch._plan_keyed_small(*args)
    vectorized = dispatch._plan_keyed_vectorized(*args)
    for a, b in ((small.positions, vectorized.positions), (small.owners, vectorized.owners),
                 (small.bounds, vectorized.bounds)):
        assert a.tolist() == b.tolist() and a.dtype == b.dtype
