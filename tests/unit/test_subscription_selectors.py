"""Key_Shared selectors: auto-split, sticky and consistent hashing.

Goal: each mode gives every slot the owner its rules say, and reports every
move exactly, so the dispatcher can drain moved slots.

Method: worked examples of each rule (PIP-34's split and merge, sticky
conflicts named, consistent-hash restore by name); hypothesis sequences of
joins and leaves after which `check_map` verifies the map (owner table,
`owner_of` and `ranges_of` agree; with >= 1 consumer, every slot has exactly
one owner) and `check_changes` verifies that the reported `RangeChanges`
turn the old map into the new one.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.subscription.selector import (
    NO_OWNER,
    DuplicateConsumer,
    KeySharedSelector,
    RangeChanges,
    RangeMove,
    SelectorError,
    SelectorFull,
    UnknownConsumer,
    diff_segments,
)
from broker.subscription.selector_auto_split import AutoSplitSelector
from broker.subscription.selector_consistent import ConsistentHashSelector, ring_points
from broker.subscription.selector_sticky import RangeConflict, StickySelector
from sdk.core.hashing import SLOT_COUNT, SLOT_MAX
from sdk.core.model import HashRange

R = HashRange
SAMPLE_SLOTS = [0, 1, 2, 100, 16383, 16384, 32767, 32768, 40000, 49151, 65534, SLOT_MAX]


def owner_list(selector: KeySharedSelector) -> list[str | None]:
    table = selector.owner_table()
    return [table.names[i] for i in table.indexes]


def range_map(selector: KeySharedSelector) -> dict[str, list[HashRange]]:
    return {name: selector.ranges_of(name) for name in selector.consumers()}


def check_map(selector: KeySharedSelector, full: bool) -> None:
    """Table, owner_of and ranges_of agree; `full`: every slot has exactly one owner."""
    owners = owner_list(selector)
    assert len(owners) == SLOT_COUNT
    table = selector.owner_table()
    assert table.names[0] is None and list(table.names[1:]) == selector.consumers()
    for slot in SAMPLE_SLOTS:
        assert selector.owner_of(slot) == owners[slot] == table.owner_of(slot)
    everyone = sorted((r, name) for name, ranges in range_map(selector).items() for r in ranges)
    for (a, _), (b, _) in itertools.pairwise(everyone):
        assert a.slot_last < b.slot_first, f"ranges {a} and {b} overlap"
    rebuilt: list[str | None] = [None] * SLOT_COUNT
    for r, name in everyone:
        rebuilt[r.slot_first : r.slot_last + 1] = [name] * r.size
    assert rebuilt == owners
    if full and selector.consumers():
        assert NO_OWNER not in table.indexes, "a slot has no owner"
        assert sum(r.size for r, _ in everyone) == SLOT_COUNT
    if not selector.consumers():
        assert set(owners) == {None}


def check_changes(before: list[str | None], after: list[str | None],
                  ranges_before: dict[str, list[HashRange]],
                  ranges_after: dict[str, list[HashRange]], changes: RangeChanges) -> None:
    """Applying the reported moves to `before` gives `after`, and nothing else moved."""
    replayed = list(before)
    for move in changes.moves:
        first, last = move.hash_range.slot_first, move.hash_range.slot_last
        assert set(replayed[first : last + 1]) == {move.from_consumer}
        replayed[first : last + 1] = [move.to_consumer] * move.hash_range.size
        assert move.from_consumer != move.to_consumer
    assert replayed == after
    for name in set(ranges_before) | set(ranges_after):
        old = ranges_before.get(name, [])
        new = ranges_after.get(name, [])
        if old == new:
            assert name not in changes.consumers
        else:
            assert changes.consumers[name] == (tuple(old), tuple(new))
    assert changes.is_empty() == (before == after)


def apply(selector: KeySharedSelector, op: str, name: str,
          ranges: tuple[HashRange, ...] = ()) -> RangeChanges:
    """Add or remove `name`, checking the reported changes against the maps."""
    before, ranges_before = owner_list(selector), range_map(selector)
    if op == "add":  # noqa: SIM108 - reads better than a two-call ternary
        changes = selector.add_consumer(name, 0, ranges)
    else:
        changes = selector.remove_consumer(name)
    check_map(selector, full=False)
    check_changes(before, owner_list(selector), ranges_before, range_map(selector), changes)
    return changes


# -- auto-split ------------------------------------------------------------------------


def test_auto_split_first_consumer_owns_everything_and_none_means_no_owner() -> None:
    selector = AutoSplitSelector()
    check_map(selector, full=True)
    assert selector.owner_of(5) is None
    changes = apply(selector, "add", "c1")
    assert selector.ranges_of("c1") == [R(0, SLOT_MAX)]
    assert changes.moves == (RangeMove(R(0, SLOT_MAX), None, "c1"),)
    assert changes.consumers == {"c1": ((), (R(0, SLOT_MAX),))}
    apply(selector, "remove", "c1")
    check_map(selector, full=True)
    assert selector.owner_of(0) is None


def test_auto_split_join_takes_upper_half_of_busiest() -> None:
    selector = AutoSplitSelector()
    selector.add_consumer("c1", 0)
    changes = apply(selector, "add", "c2")
    assert selector.ranges_of("c1") == [R(0, 32767)]
    assert selector.ranges_of("c2") == [R(32768, SLOT_MAX)]
    assert changes.lost_by("c1") == [R(32768, SLOT_MAX)]
    # equal sizes: the higher dispatch rate is the busiest (PIP-34's T2)
    selector.set_dispatch_rate("c2", 50.0)
    apply(selector, "add", "c3")
    assert selector.ranges_of("c2") == [R(32768, 49151)]
    assert selector.ranges_of("c3") == [R(49152, SLOT_MAX)]
    # largest range wins over any rate
    selector.set_dispatch_rate("c3", 1000.0)
    apply(selector, "add", "c4")
    assert selector.ranges_of("c1") == [R(0, 16383)]
    assert selector.ranges_of("c4") == [R(16384, 32767)]
    check_map(selector, full=True)


def test_auto_split_tie_on_size_and_rate_goes_to_lowest_name() -> None:
    selector = AutoSplitSelector()
    selector.add_consumer("b", 0)
    selector.add_consumer("a", 0)  # b: 0..32767, a: 32768..65535, both rate 0
    apply(selector, "add", "c")
    assert selector.ranges_of("a") == [R(32768, 49151)]
    assert selector.ranges_of("c") == [R(49152, SLOT_MAX)]


def test_auto_split_odd_range_keeps_larger_half() -> None:
    # Sizes stay powers of two or their sums under real joins and leaves; an odd
    # size needs a state built directly (white-box).
    selector = AutoSplitSelector()
    selector._joined_ms = {"x": 0}
    selector._replace_segments([(0, 2, "x")])
    selector.add_consumer("y", 0)
    assert selector.ranges_of("x") == [R(0, 1)]
    assert selector.ranges_of("y") == [R(2, 2)]


def test_auto_split_leave_merges_into_lower_rate_neighbour() -> None:
    selector = AutoSplitSelector()
    for name in ["a", "b", "c"]:
        selector.add_consumer(name, 0)
    # b split a; c split a (tie on size and rate -> lowest name):
    # a 0..16383, c 16384..32767, b 32768..65535.
    assert selector.ranges_of("c") == [R(16384, 32767)]
    selector.set_dispatch_rate("a", 10.0)
    selector.set_dispatch_rate("b", 5.0)
    changes = apply(selector, "remove", "c")
    assert selector.ranges_of("b") == [R(16384, SLOT_MAX)]  # right neighbour, lower rate
    assert changes.moves == (RangeMove(R(16384, 32767), "c", "b"),)
    selector.add_consumer("c", 0)  # splits b (largest): b 16384..40959, c 40960..65535
    assert selector.ranges_of("c") == [R(40960, SLOT_MAX)]
    apply(selector, "remove", "b")  # a has rate 10, c (new) 0 -> c inherits
    assert selector.ranges_of("c") == [R(16384, SLOT_MAX)]


def test_auto_split_leave_tie_goes_left_and_edges_have_one_neighbour() -> None:
    selector = AutoSplitSelector()
    for name in ["a", "b", "c"]:
        selector.add_consumer(name, 0)  # a 0..16383, c 16384..32767, b 32768..65535
    apply(selector, "remove", "c")  # a and b both rate 0 -> left (a)
    assert selector.ranges_of("a") == [R(0, 32767)]
    apply(selector, "remove", "a")  # left edge: only a right neighbour
    assert selector.ranges_of("b") == [R(0, SLOT_MAX)]
    selector.add_consumer("z", 0)
    apply(selector, "remove", "z")  # right edge: only a left neighbour
    assert selector.ranges_of("b") == [R(0, SLOT_MAX)]


def test_auto_split_refuses_bad_input() -> None:
    selector = AutoSplitSelector()
    selector.add_consumer("a", 5)
    assert selector.joined_ms("a") == 5
    with pytest.raises(DuplicateConsumer, match="'a' is already attached"):
        selector.add_consumer("a", 0)
    with pytest.raises(SelectorError, match="only sticky mode"):
        selector.add_consumer("b", 0, [R(0, 5)])
    with pytest.raises(UnknownConsumer, match="'zz' is not attached"):
        selector.remove_consumer("zz")
    with pytest.raises(UnknownConsumer):
        selector.set_dispatch_rate("zz", 1.0)
    with pytest.raises(SelectorError, match="need >= 0"):
        selector.set_dispatch_rate("a", -1.0)
    with pytest.raises(SelectorError, match="need >= 0"):
        selector.set_dispatch_rate("a", float("nan"))
    assert selector.dispatch_rate("a") == 0.0
    assert selector.consumers() == ["a"]


def test_auto_split_full_when_every_range_is_one_slot() -> None:
    selector = AutoSplitSelector()
    # White-box: 65,536 real joins would take minutes; build the full state directly.
    selector._joined_ms = {f"c{i}": 0 for i in range(SLOT_COUNT)}
    selector._replace_segments([(i, i, f"c{i}") for i in range(SLOT_COUNT)])
    with pytest.raises(SelectorFull, match="one slot wide"):
        selector.add_consumer("late", 0)
    assert "late" not in selector.consumers()


ops = st.lists(st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 7),
                         st.floats(0, 100)), max_size=14)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_auto_split_every_slot_has_one_owner(steps: list[tuple[str, int, float]]) -> None:
    selector = AutoSplitSelector()
    for op, n, rate in steps:
        name = f"c{n}"
        attached = name in selector.consumers()
        if op == "add" and not attached:
            apply(selector, "add", name)
            selector.set_dispatch_rate(name, rate)
        elif op == "remove" and attached:
            apply(selector, "remove", name)
        check_map(selector, full=True)
        for consumer in selector.consumers():
            assert len(selector.ranges_of(consumer)) == 1  # one contiguous range each


# -- sticky ----------------------------------------------------------------------------


def test_sticky_overlap_is_refused_naming_the_other_consumer() -> None:
    selector = StickySelector()
    selector.add_consumer("a", 0, [R(100, 200)])
    selector.add_consumer("b", 0, [R(300, 400), R(0, 10)])
    with pytest.raises(RangeConflict) as refused:
        selector.add_consumer("c", 0, [R(500, 600), R(150, 350)])
    error = refused.value
    assert error.other_consumer == "a" and error.consumer == "c"
    assert error.overlap == R(150, 200)
    assert "'a'" in str(error) and "150-200" in str(error) and "'c'" in str(error)
    assert "c" not in selector.consumers()
    with pytest.raises(RangeConflict, match=r"'b'.*in slots 400-400"):
        selector.add_consumer("d", 0, [R(400, 450)])
    assert isinstance(error, ValueError)


def test_sticky_gaps_have_no_owner_and_leaving_frees_ranges() -> None:
    selector = StickySelector()
    changes = apply(selector, "add", "a", (R(10, 20), R(21, 30)))  # touching: merged
    assert selector.ranges_of("a") == [R(10, 30)]
    assert changes.moves == (RangeMove(R(10, 30), None, "a"),)
    apply(selector, "add", "b", (R(31, 31),))
    check_map(selector, full=False)
    assert selector.owner_of(9) is None and selector.owner_of(31) == "b"
    assert selector.owner_of(SLOT_MAX) is None
    changes = apply(selector, "remove", "a")
    assert changes.moves == (RangeMove(R(10, 30), "a", None),)
    assert selector.owner_of(15) is None
    apply(selector, "add", "c", (R(0, 30),))
    assert selector.ranges_of("c") == [R(0, 30)]


def test_sticky_refuses_bad_declarations() -> None:
    selector = StickySelector()
    with pytest.raises(SelectorError, match="declared no hash range"):
        selector.add_consumer("a", 0)
    with pytest.raises(SelectorError, match=r"'a'.*overlap"):
        selector.add_consumer("a", 0, [R(0, 10), R(5, 20)])
    selector.add_consumer("a", 0, [R(0, 10)])
    with pytest.raises(DuplicateConsumer):
        selector.add_consumer("a", 0, [R(20, 30)])
    with pytest.raises(UnknownConsumer):
        selector.remove_consumer("b")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 400), st.integers(0, 120)),
                max_size=12))
def test_sticky_accepts_exactly_the_non_overlapping(steps: list[tuple[int, int, int]]) -> None:
    selector = StickySelector()
    for n, first, size in steps:
        name = f"c{n}"
        if name in selector.consumers():
            apply(selector, "remove", name)
            continue
        wanted = R(first, first + size)
        clash = [o for o in selector.consumers() for r in selector.ranges_of(o)
                 if r.slot_first <= wanted.slot_last and wanted.slot_first <= r.slot_last]
        if clash:
            with pytest.raises(RangeConflict) as refused:
                selector.add_consumer(name, 0, [wanted])
            assert refused.value.other_consumer in clash
        else:
            apply(selector, "add", name, (wanted,))
        check_map(selector, full=False)


# -- consistent hashing ----------------------------------------------------------------


def test_consistent_points_come_from_the_name() -> None:
    selector = ConsistentHashSelector(points_per_consumer=5)
    selector.add_consumer("a", 0)
    assert [p for p, _ in selector.ring()] == ring_points("a", 5)
    assert len(ring_points("a", 100)) <= 100
    check_map(selector, full=True)
    with pytest.raises(ValueError, match="need >= 1"):
        ConsistentHashSelector(points_per_consumer=0)
    with pytest.raises(SelectorError, match="only sticky mode"):
        selector.add_consumer("b", 0, [R(0, 1)])
    with pytest.raises(DuplicateConsumer):
        selector.add_consumer("a", 0)
    with pytest.raises(UnknownConsumer):
        selector.remove_consumer("b")


def test_consistent_lookup_is_first_point_at_or_after_and_wraps() -> None:
    selector = ConsistentHashSelector(points_per_consumer=3)
    for name in ["a", "b", "c"]:
        selector.add_consumer(name, 0)
    ring = selector.ring()
    for position, name in ring:
        assert selector.owner_of(position) == name
        if position > 0:
            earlier = [n for p, n in ring if p >= position - 1]
            assert selector.owner_of(position - 1) == earlier[0]
    first_point_owner = ring[0][1]
    if ring[-1][0] < SLOT_MAX:
        assert selector.owner_of(SLOT_MAX) == first_point_owner
    assert selector.owner_of(0) == first_point_owner


def _colliding_names() -> tuple[str, str]:
    seen: dict[int, str] = {}
    for i in range(5000):
        name = f"n{i}"
        position = ring_points(name, 1)[0]
        if position in seen:
            return seen[position], name
        seen[position] = name
    raise AssertionError("no collision among 5000 names")  # pragma: no cover


def test_consistent_point_collision_goes_to_lowest_name() -> None:
    first, second = _colliding_names()
    low, high = sorted([first, second])
    for order in ([low, high], [high, low]):
        selector = ConsistentHashSelector(points_per_consumer=1)
        for name in order:
            selector.add_consumer(name, 0)
        assert selector.ring() == [(ring_points(low, 1)[0], low)]
        assert selector.ranges_of(low) == [R(0, SLOT_MAX)]
        assert selector.ranges_of(high) == []
        check_map(selector, full=True)
        changes = apply(selector, "remove", low)
        assert selector.ranges_of(high) == [R(0, SLOT_MAX)]
        assert changes.lost_by(low) == [R(0, SLOT_MAX)]


names = st.sets(st.sampled_from([f"c{i}" for i in range(12)]), min_size=1, max_size=8)


@settings(max_examples=40, deadline=None)
@given(names, st.randoms(use_true_random=False))
def test_consistent_readd_restores_exact_ranges(
        members: set[str], rnd: random.Random) -> None:
    order = sorted(members)
    rnd.shuffle(order)
    selector = ConsistentHashSelector(points_per_consumer=20)
    for name in order:
        changes = apply(selector, "add", name)
        # a join moves slots only to the newcomer
        assert all(m.to_consumer == name for m in changes.moves)
        check_map(selector, full=True)
    map_before = selector.segments()
    for name in order:
        ranges = selector.ranges_of(name)
        changes = apply(selector, "remove", name)
        assert all(m.from_consumer == name for m in changes.moves)  # only its slots move
        check_map(selector, full=True)
        apply(selector, "add", name)
        assert selector.ranges_of(name) == ranges
        assert selector.segments() == map_before
    other = ConsistentHashSelector(points_per_consumer=20)
    for name in sorted(members, reverse=True):
        other.add_consumer(name, 0)
    assert other.segments() == map_before  # the map depends on names only


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 6)),
                max_size=12))
def test_consistent_every_slot_has_one_owner(steps: list[tuple[str, int]]) -> None:
    selector = ConsistentHashSelector()
    for op, n in steps:
        name = f"c{n}"
        attached = name in selector.consumers()
        if op == "add" and not attached:
            apply(selector, "add", name)
        elif op == "remove" and attached:
            apply(selector, "remove", name)
        check_map(selector, full=True)


# -- shared helpers --------------------------------------------------------------------


@pytest.mark.parametrize("mode", [AutoSplitSelector, ConsistentHashSelector, StickySelector])
def test_owner_table_is_cached_until_a_change(
        mode: type[AutoSplitSelector | ConsistentHashSelector | StickySelector]) -> None:
    selector = mode()
    declared = (R(0, SLOT_MAX),) if mode is StickySelector else ()
    selector.add_consumer("a", 0, declared)
    table = selector.owner_table()
    assert selector.owner_table() is table
    selector.remove_consumer("a")
    assert selector.owner_table() is not table


def test_diff_of_identical_maps_is_empty_and_moves_coalesce() -> None:
    assert diff_segments([(0, 5, "a")], [(0, 5, "a")]) == RangeChanges({}, ())
    changes = diff_segments([(0, 5, "a"), (6, 9, "b")], [(0, 9, "c")])
    assert changes.moves == (RangeMove(R(0, 5), "a", "c"), RangeMove(R(6, 9), "b", "c"))
    changes = diff_segments([(0, 3, "a"), (4, 9, "a")], [(0, 9, "b")])
    assert changes.moves == (RangeMove(R(0, 9), "a", "b"),)
