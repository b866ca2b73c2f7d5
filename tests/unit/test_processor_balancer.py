"""The event processor's balancer (sdk/processor/balancer.py).

Goal: Event Hubs' rules hold for any listing: renew everything live of
one's own, claim only claimable partitions (none, unowned, expired or
released), greedy up to the maximum and balanced one at a time, steal one
only when nothing is claimable and below the minimum, from the most loaded
owner. And the property that matters: processors that run the balancer in
turn against one compare-and-set store converge to floor(P/N)..ceil(P/N)
with every partition owned exactly once, from any start, through joins and
leaves.
Method: hypothesis draws listings and timings; a small in-memory CAS store
(a fake, as unit tests may use) drives whole groups of balancers.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.processor.balancer import Group, mix, plan_claims
from sdk.stores.records import PartitionOwnership

EXPIRATION = 60_000
NOW = 1_000_000


def group(owner: str) -> Group:
    return Group("ns", "t", "g", owner)


def record(partition: int, owner: str, age_ms: int = 0, etag: str = "e") -> PartitionOwnership:
    return PartitionOwnership("ns", "t", "g", partition, owner, etag, NOW - age_ms, 1)


class CasStore:
    """An in-memory ownership store with the contract's compare-and-set."""

    def __init__(self) -> None:
        self.records: dict[int, PartitionOwnership] = {}
        self.version = 0

    def claim(self, claims: tuple[PartitionOwnership, ...], now: int) -> list[PartitionOwnership]:
        won = []
        for c in claims:
            current = self.records.get(c.partition)
            if (current.etag if current else None) != c.etag:
                continue
            self.version += 1
            epoch = current.epoch if current else 0
            if c.owner_id and c.owner_id != (current.owner_id if current else ""):
                epoch += 1
            stored = replace(c, etag=str(self.version), last_modified_ms=now, epoch=epoch)
            self.records[c.partition] = stored
            won.append(stored)
        return won

    def counts(self, owners: list[str], now: int) -> dict[str, int]:
        counts = dict.fromkeys(owners, 0)
        for r in self.records.values():
            if r.owner_id and r.last_modified_ms + EXPIRATION >= now:
                counts[r.owner_id] = counts.get(r.owner_id, 0) + 1
        return counts


def cycle(store: CasStore, owners: list[str], partitions: int, now: int, salt: int,
          strategy: str = "greedy") -> int:
    """Every owner balances once, in turn; returns the steals that won."""
    steals = 0
    for i, owner in enumerate(owners):
        plan = plan_claims(group(owner), partitions, list(store.records.values()), now,
                           EXPIRATION, strategy, mix(salt, i))  # type: ignore[arg-type]
        won = store.claim(plan.claims, now)
        steals += plan.stolen is not None and any(w.partition == plan.stolen for w in won)
    return steals


def balanced(store: CasStore, owners: list[str], partitions: int, now: int) -> bool:
    counts = store.counts(owners, now)
    low, high = partitions // len(owners), -(-partitions // len(owners))
    return set(counts) == set(owners) and all(low <= c <= high for c in counts.values()) \
        and sum(counts.values()) == partitions


# ---------------------------------------------------------------- one plan


def test_first_owner_claims_everything_greedily_or_one_when_balanced() -> None:
    greedy = plan_claims(group("a"), 8, [], NOW, EXPIRATION, "greedy", 1)
    assert greedy.acquired == tuple(range(8)) and (greedy.minimum, greedy.maximum) == (8, 8)
    assert all(c.etag is None and c.owner_id == "a" for c in greedy.claims)
    one = plan_claims(group("a"), 8, [], NOW, EXPIRATION, "balanced", 1)
    assert len(one.acquired) == 1 and one.stolen is None


def test_expired_and_released_records_are_claimable_with_their_etags() -> None:
    listing = [record(0, "b", age_ms=EXPIRATION + 1, etag="old"), record(1, "", etag="rel"),
               record(2, "b", age_ms=EXPIRATION)]  # exactly at the limit: still live
    plan = plan_claims(group("a"), 3, listing, NOW, EXPIRATION, "greedy", 7)
    assert plan.owners == 2 and plan.maximum == 2
    claimed = {c.partition: c.etag for c in plan.claims}
    assert set(claimed) <= {0, 1} and len(claimed) == 2
    assert claimed == {0: "old", 1: "rel"}


def test_renews_its_own_and_steals_only_below_the_minimum() -> None:
    listing = [record(p, "b") for p in range(5)] + [record(5, "a", etag="mine")]
    plan = plan_claims(group("a"), 6, listing, NOW, EXPIRATION, "greedy", 3)
    assert plan.renewals == (5,) and plan.claims[0].etag == "mine"
    assert plan.stolen_from == "b" and plan.stolen in range(5)
    assert plan.claims[-1].partition == plan.stolen and plan.claims[-1].owner_id == "a"
    even = [record(p, "b") for p in range(3)] + [record(p, "a") for p in range(3, 6)]
    assert plan_claims(group("a"), 6, even, NOW, EXPIRATION, "greedy", 3).stolen is None


def test_at_the_minimum_it_steals_only_from_an_owner_above_the_maximum() -> None:
    # 5 partitions, 3 owners: minimum 1, maximum 2. 3/1/1 is not balanced.
    listing = [record(p, "b") for p in range(3)] + [record(3, "c"), record(4, "a")]
    plan = plan_claims(group("a"), 5, listing, NOW, EXPIRATION, "greedy", 5)
    assert (plan.minimum, plan.maximum) == (1, 2) and plan.stolen_from == "b"
    fine = [record(p, "b") for p in range(2)] + [record(2, "c"), record(3, "c"), record(4, "a")]
    assert plan_claims(group("a"), 5, fine, NOW, EXPIRATION, "greedy", 5).stolen is None


def test_steals_from_the_most_loaded_owner() -> None:
    listing = ([record(p, "b") for p in range(2)] + [record(p, "c") for p in range(2, 7)]
               + [record(7, "d")])
    plan = plan_claims(group("a"), 8, listing, NOW, EXPIRATION, "balanced", 11)
    assert plan.stolen_from == "c" and plan.stolen in range(2, 7)


def test_records_beyond_the_partition_count_are_ignored() -> None:
    plan = plan_claims(group("a"), 2, [record(5, "a"), record(0, "b")], NOW, EXPIRATION,
                       "greedy", 0)
    assert plan.renewals == () and plan.acquired == (1,) and plan.owners == 2


@given(partitions=st.integers(1, 40),
       listing=st.lists(st.tuples(st.integers(0, 45), st.sampled_from(["", "a", "b", "c", "d"]),
                                  st.integers(0, 2 * EXPIRATION)), max_size=60),
       strategy=st.sampled_from(["greedy", "balanced"]), salt=st.integers(0, 2**64 - 1))
def test_a_plan_keeps_the_rules_for_any_listing(partitions: int,
                                                 listing: list[tuple[int, str, int]],
                                                 strategy: str, salt: int) -> None:
    records = {p: record(p, owner, age) for p, owner, age in listing}
    plan = plan_claims(group("a"), partitions, list(records.values()), NOW, EXPIRATION,
                       strategy, salt)  # type: ignore[arg-type]
    live = {p: r for p, r in records.items()
            if p < partitions and r.owner_id and r.last_modified_ms + EXPIRATION >= NOW}
    mine = sorted(p for p, r in live.items() if r.owner_id == "a")
    assert list(plan.renewals) == mine
    assert all(p not in live for p in plan.acquired)
    room = plan.maximum - len(mine)
    assert len(plan.acquired) <= (max(room, 0) if strategy == "greedy" else min(1, max(room, 0)))
    assert [c.partition for c in plan.claims] == mine + list(plan.acquired) + (
        [plan.stolen] if plan.stolen is not None else [])
    assert all(c.owner_id == "a" for c in plan.claims)
    assert len({c.partition for c in plan.claims}) == len(plan.claims)
    counts = {o: sum(r.owner_id == o for r in live.values()) for o in {"b", "c", "d"}}
    if plan.stolen is not None:
        assert not plan.acquired and len(mine) <= plan.minimum
        assert len(mine) < plan.minimum or max(counts.values()) > plan.maximum
        assert counts[plan.stolen_from] == max(counts.values())  # type: ignore[index]
    elif not plan.acquired:
        assert len(mine) >= plan.minimum
    assert plan == plan_claims(group("a"), partitions, list(records.values()), NOW,
                               EXPIRATION, strategy, salt)  # type: ignore[arg-type]


# ---------------------------------------------------------------- groups converge


@settings(max_examples=60, deadline=None)
@given(partitions=st.integers(1, 40), owners=st.integers(1, 6),
       strategy=st.sampled_from(["greedy", "balanced"]), salt=st.integers(0, 2**32))
def test_a_group_converges_from_cold(partitions: int, owners: int, strategy: str,
                                     salt: int) -> None:
    store, names = CasStore(), [f"p{i}" for i in range(owners)]
    rounds = partitions + 2 * owners + 2  # balanced: one claim per owner and cycle
    for r in range(rounds):
        cycle(store, names, partitions, NOW + r, salt + r, strategy)
        if balanced(store, names, partitions, NOW + r):
            break
    assert balanced(store, names, partitions, NOW + r), (store.counts(names, NOW + r), r)


@settings(max_examples=40, deadline=None)
@given(partitions=st.integers(2, 32), owners=st.integers(2, 5), salt=st.integers(0, 2**32))
def test_a_join_steals_and_a_leave_is_taken_over_after_expiration(partitions: int, owners: int,
                                                                  salt: int) -> None:
    store, names = CasStore(), [f"p{i}" for i in range(owners)]
    now = NOW
    for _ in range(partitions + 4):
        cycle(store, names, partitions, now, salt)
        now += 1
    assert balanced(store, names, partitions, now)
    names.append("joiner")
    steals = 0
    for _ in range(2 * partitions + 4):
        steals += cycle(store, names, partitions, now, salt)
        now += 1
        if balanced(store, names, partitions, now):
            break
    assert balanced(store, names, partitions, now)
    assert steals == store.counts(names, now)["joiner"]  # nothing was claimable: all stolen
    gone = names.pop(0)  # dies without releasing: its records must expire first
    held = store.counts([*names, gone], now)[gone]
    cycle(store, names, partitions, now, salt)
    assert store.counts([*names, gone], now)[gone] == held  # balanced: nothing to steal
    now += EXPIRATION + 1
    for _ in range(partitions + 4):
        cycle(store, names, partitions, now, salt)
        now += 1
    assert balanced(store, names, partitions, now)


def test_the_mix_spreads_first_choices() -> None:
    firsts = {min(range(12), key=lambda p: mix(p, salt)) for salt in range(200)}
    assert len(firsts) == 12
