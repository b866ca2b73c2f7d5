"""The event processor's load balancer: which partitions to claim this cycle.

Pure (no I/O, no clock, no randomness: time is `now_ms`, and `salt` stands in
for Event Hubs' random choices so each processor picks differently yet a
test can replay a choice). The algorithm is Event Hubs' (azure-sdk-for-python
`ownership_manager.py`, the same in every language), every cycle:

1. A record is expired when `last_modified_ms + expiration_ms < now_ms`, or
   released when its owner is "". Partitions with no record, an expired or a
   released one are claimable.
2. Active owners are the distinct owners of live records, plus this one.
   With P partitions and N active owners each should own between
   `minimum = P // N` and `maximum = ceil(P / N)`.
3. Every live record of this owner is claimed again (renewal: it refreshes
   last_modified and keeps the etag chain).
4. Owning fewer than `maximum`: greedy claims up to `maximum - owned`
   claimable partitions at once; balanced claims one per cycle.
5. If nothing claimable was claimed, it steals one partition from the
   owner with the most when it owns fewer than `minimum`, or (the .NET
   refinement, `PartitionLoadBalancer.FindAndClaimOwnershipAsync`) when it
   owns exactly `minimum`, no owner has fewer, and some owner has more than
   `maximum`: otherwise 5 partitions among 3 owners could stay at 3/1/1.

Must not know: how claims are written (the store does the compare-and-set)
or what happens to the partitions it wins.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from sdk.stores.records import PartitionOwnership

Strategy = Literal["greedy", "balanced"]
STRATEGIES: tuple[Strategy, ...] = ("greedy", "balanced")
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class Group:
    """Who balances: this owner, in this group of this topic."""

    namespace: str
    topic: str
    consumer_group: str
    owner_id: str


@dataclass(frozen=True, slots=True)
class Plan:
    """One cycle's decision.

    Attributes:
        claims: every claim to send (renewals, then new ones, then the steal),
            each with the etag it was listed with (None: no record yet).
        renewals: partitions this owner holds and renews.
        acquired: claimable partitions it claims.
        stolen: the partition it steals (None: no steal), from `stolen_from`.
        owners, minimum, maximum: active owners and the target per owner.
    """

    claims: tuple[PartitionOwnership, ...]
    renewals: tuple[int, ...]
    acquired: tuple[int, ...]
    stolen: int | None
    stolen_from: str | None
    owners: int
    minimum: int
    maximum: int


def mix(value: int, salt: int) -> int:
    """A 64-bit hash of value and salt (splitmix64's finalizer): a stable,
    well-spread order in place of a random choice."""
    z = (value * 0x9E3779B97F4A7C15 + salt) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def is_live(record: PartitionOwnership, now_ms: int, expiration_ms: int) -> bool:
    """Owned and not expired (rule 1)."""
    return bool(record.owner_id) and record.last_modified_ms + expiration_ms >= now_ms


def plan_claims(group: Group, partitions: int, ownership: Sequence[PartitionOwnership],
                now_ms: int, expiration_ms: int, strategy: Strategy, salt: int) -> Plan:
    """The claims this owner sends this cycle (the module docstring's rules).

    Args:
        partitions: the topic's partition count (records beyond it are ignored).
        ownership: the group's records as the ownership store listed them.
        now_ms: this cycle's time, on the clock the store's last_modified_ms uses.
        expiration_ms: how long a record lives without renewal.
        salt: varies the choice among equals (any int; e.g. random per cycle).
    """
    assert partitions >= 1 and expiration_ms > 0 and strategy in STRATEGIES
    assert group.owner_id, "an owner id is never empty (empty means released)"
    records = {r.partition: r for r in ownership if 0 <= r.partition < partitions}
    live = {p: r for p, r in records.items() if is_live(r, now_ms, expiration_ms)}
    claimable = [p for p in range(partitions) if p not in live]
    by_owner: dict[str, list[int]] = defaultdict(list)
    for p, record in sorted(live.items()):
        by_owner[record.owner_id].append(p)
    mine = by_owner.get(group.owner_id, [])
    owners = len(by_owner) + (0 if group.owner_id in by_owner else 1)
    minimum, maximum = partitions // owners, -(-partitions // owners)
    acquired: list[int] = []
    if len(mine) < maximum and claimable:
        wanted = maximum - len(mine) if strategy == "greedy" else 1
        acquired = sorted(sorted(claimable, key=lambda p: mix(p, salt))[:wanted])
    stolen, stolen_from = None, None
    if not acquired and _should_steal(by_owner, len(mine), owners, minimum, maximum):
        stolen_from, stolen = _victim(by_owner, group.owner_id, salt)
    claims = [replace(live[p], owner_id=group.owner_id) for p in mine]
    claims += [_claim(group, p, records.get(p)) for p in acquired]
    if stolen is not None:
        claims.append(replace(live[stolen], owner_id=group.owner_id))
    return Plan(tuple(claims), tuple(mine), tuple(acquired), stolen, stolen_from,
                owners, minimum, maximum)


def _claim(group: Group, partition: int, record: PartitionOwnership | None
           ) -> PartitionOwnership:
    """A claim of a claimable partition, carrying the etag it was listed with."""
    if record is not None:
        return replace(record, owner_id=group.owner_id)
    return PartitionOwnership(group.namespace, group.topic, group.consumer_group, partition,
                              group.owner_id)


def _should_steal(by_owner: dict[str, list[int]], mine: int, owners: int, minimum: int,
                  maximum: int) -> bool:
    """Rule 5: below the minimum, or at it while another owner is above the maximum
    and nobody is below the minimum (this owner counts even when it owns nothing)."""
    if mine < minimum:
        return True
    counts = [len(ps) for ps in by_owner.values()] + [0] * (owners - len(by_owner))
    return mine == minimum and min(counts) >= minimum and max(counts) > maximum


def _victim(by_owner: dict[str, list[int]], owner_id: str, salt: int
            ) -> tuple[str | None, int | None]:
    """The most loaded other owner (ties by a salted order) and one of its partitions."""
    others = [(len(ps), mix(hash_text(o), salt), o) for o, ps in by_owner.items() if o != owner_id]
    if not others:
        return None, None
    _, _, victim = max(others)
    partition = max(by_owner[victim], key=lambda p: mix(p, salt))
    return victim, partition


def hash_text(text: str) -> int:
    """A stable integer of a string (Python's hash() of str varies per process)."""
    value = 0
    for byte in text.encode():
        value = mix(value ^ byte, 0x5851F42D4C957F2D)
    return value
