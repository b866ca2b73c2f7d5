"""Filter pushdown for batch reads: Spark conditions -> narrower reads. Pure.

Rules:
1. Pushdown only ever narrows a read to a SUPERSET of the rows that match;
   Spark evaluates every condition again after the scan (the reader hands
   them all back), so a read is never wrong for the query that pushed it.
2. What narrows what:
   * `key_long` / `key_string` `=` or `IN` -> a broker-side key filter:
     RANGE with size 1 for non-negative integers (exact on the primary key),
     otherwise MOD over 2**32 buckets (a small superset). Never hash ranges:
     an event's slot comes from its ordering key, which may differ from its key.
   * `ordering_key` `=`/`IN` and `slot` `=`/`IN`/`<`/`<=`/`>`/`>=` -> only
     the slots that can match (splits whose ranges miss them are dropped).
   * `partition`, `topic` `=`/`IN` -> only those topic partitions.
   * `offset` `=`/`IN`/`<`/`<=`/`>`/`>=` -> a narrower [start, stop).
3. Conditions are ANDed (that is how Spark hands them over).
4. Pruning is only safe where Spark cannot reuse the pruned reader for a
   later query without these conditions (PySpark 4.3 can: see
   docs/spark.md). The guard is the condition `offset >= 0` (`GUARD`), true
   of every event: a DataFrame that carries it makes Spark push conditions
   again for every query, so no query ever gets another's pruned reader.
   `plan_pushdown` prunes only when the guard is among the conditions.

This module must not know about PySpark's Filter classes or I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeGuard, TypeVar

import mmh3

from sdk.core.filters import FilterType, KeyFilterSpec, is_integer_text
from sdk.core.hashing import SLOT_MAX, slot_of
from sdk.core.model import HashRange, normalize_ranges
from spark_connector.partitioning import Split

T = TypeVar("T")

COMPARISONS = ("=", "in", "<", "<=", ">", ">=")
MOD_BUCKETS = 1 << 32  # >= every murmur3 value, so a string's bucket is its hash
KEY_VALUES_MAX = 10_000  # the broker's id-list limit; more keys: no key filter


@dataclass(frozen=True, slots=True)
class Condition:
    """One pushed condition: `column op value(s)`; `in` carries many values."""

    column: str
    op: str
    values: tuple[object, ...]


GUARD = Condition("offset", ">=", (0,))


@dataclass(frozen=True, slots=True)
class PushdownPlan:
    """How to narrow a read; None fields do not narrow."""

    key_filter: KeyFilterSpec | None = None
    slot_ranges: tuple[HashRange, ...] | None = None
    partitions: frozenset[int] | None = None
    topics: frozenset[str] | None = None
    offset_start: int = 0
    offset_stop: int | None = None
    empty: bool = False  # the conditions contradict each other: read nothing

    @property
    def narrows(self) -> bool:
        return self != PushdownPlan()


def plan_pushdown(conditions: Sequence[Condition]) -> PushdownPlan:
    """The plan for ANDed conditions; no narrowing at all without the GUARD (rule 4)."""
    if GUARD not in conditions:
        return PushdownPlan()
    plan = PushdownPlan()
    key_longs: set[int] | None = None
    key_strings: set[str] | None = None
    for c in conditions:
        if c.op not in COMPARISONS or not c.values:
            continue
        if c.column == "key_long" and c.op in ("=", "in"):
            key_longs = _intersect(key_longs, {v for v in c.values if _is_int(v)})
        elif c.column == "key_string" and c.op in ("=", "in"):
            key_strings = _intersect(key_strings, {v for v in c.values if isinstance(v, str)})
        else:
            plan = _narrow(plan, c)
    return _with_key_filter(plan, key_longs, key_strings)


def _narrow(plan: PushdownPlan, c: Condition) -> PushdownPlan:
    if c.column == "offset" and all(_is_int(v) for v in c.values):
        return _narrow_offsets(plan, c)
    if c.column == "slot" and all(_is_int(v) for v in c.values):
        return _narrow_slots(plan, _slot_ranges_of(c))
    if c.column == "ordering_key" and c.op in ("=", "in"):
        slots = [slot_of(v) for v in c.values if isinstance(v, str)]
        return _narrow_slots(plan, normalize_ranges([HashRange(s, s) for s in slots]))
    if c.column == "partition" and c.op in ("=", "in"):
        wanted = frozenset(int(v) for v in c.values if _is_int(v))
        partitions = wanted if plan.partitions is None else plan.partitions & wanted
        return replace(plan, partitions=partitions)
    if c.column == "topic" and c.op in ("=", "in"):
        names = frozenset(v for v in c.values if isinstance(v, str))
        topics = names if plan.topics is None else plan.topics & names
        return replace(plan, topics=topics)
    return plan


def _narrow_offsets(plan: PushdownPlan, c: Condition) -> PushdownPlan:
    values = [int(v) for v in c.values if _is_int(v)]
    low, high = min(values), max(values)
    start, stop = 0, None
    if c.op in ("=", "in"):
        start, stop = low, high + 1
    elif c.op == ">=":
        start = low
    elif c.op == ">":
        start = low + 1
    elif c.op == "<":
        stop = low
    elif c.op == "<=":
        stop = low + 1
    new_stop = plan.offset_stop if stop is None else (
        stop if plan.offset_stop is None else min(stop, plan.offset_stop))
    return replace(plan, offset_start=max(plan.offset_start, start, 0), offset_stop=new_stop)


def _slot_ranges_of(c: Condition) -> list[HashRange]:
    values = [int(v) for v in c.values if _is_int(v)]
    if c.op in ("=", "in"):
        return normalize_ranges([HashRange(v, v) for v in values if 0 <= v <= SLOT_MAX])
    first, last = 0, SLOT_MAX
    bound = values[0]
    if c.op == ">=":
        first = bound
    elif c.op == ">":
        first = bound + 1
    elif c.op == "<":
        last = bound - 1
    elif c.op == "<=":
        last = bound
    first, last = max(first, 0), min(last, SLOT_MAX)
    return [HashRange(first, last)] if first <= last else []


def _narrow_slots(plan: PushdownPlan, ranges: list[HashRange]) -> PushdownPlan:
    current = plan.slot_ranges
    narrowed = ranges if current is None else intersect_ranges(current, ranges)
    return replace(plan, slot_ranges=tuple(narrowed), empty=plan.empty or not narrowed)


def intersect_ranges(a: Sequence[HashRange], b: Sequence[HashRange]) -> list[HashRange]:
    """Slots in both lists, as sorted disjoint ranges."""
    out = [HashRange(max(x.slot_first, y.slot_first), min(x.slot_last, y.slot_last))
           for x in a for y in b
           if max(x.slot_first, y.slot_first) <= min(x.slot_last, y.slot_last)]
    return normalize_ranges(out)


def _with_key_filter(plan: PushdownPlan, key_longs: set[int] | None,
                     key_strings: set[str] | None) -> PushdownPlan:
    if key_longs is not None and not key_longs:
        return replace(plan, empty=True)
    if key_strings is not None and not key_strings:
        return replace(plan, empty=True)
    if key_longs is not None:
        return replace(plan, key_filter=_long_filter(key_longs))
    if key_strings is not None:
        return replace(plan, key_filter=_mod_filter([_bucket_of_text(s) for s in key_strings]))
    return plan


def _long_filter(keys: set[int]) -> KeyFilterSpec | None:
    if all(k >= 0 for k in keys):
        if len(keys) > KEY_VALUES_MAX:
            return None
        ids = tuple(sorted((k, k + 1) for k in keys))
        return KeyFilterSpec(FilterType.RANGE, range_size=1, range_ids=ids)
    return _mod_filter([abs(k) % MOD_BUCKETS for k in keys])


def _mod_filter(buckets: list[int]) -> KeyFilterSpec | None:
    distinct = sorted(set(buckets))
    if len(distinct) > KEY_VALUES_MAX:
        return None
    return KeyFilterSpec(FilterType.MOD, num_buckets=MOD_BUCKETS,
                         buckets=tuple((b, b + 1) for b in distinct))


def _bucket_of_text(key: str) -> int:
    """The MOD bucket the broker gives a string key (filters.py rules 4 and 5)."""
    if is_integer_text(key):
        return abs(int(key)) % MOD_BUCKETS
    return mmh3.hash(key, 0, signed=False) % MOD_BUCKETS


def _intersect(current: set[T] | None, values: set[T]) -> set[T]:
    return values if current is None else current & values


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def apply_pushdown(splits: Sequence[Split], plan: PushdownPlan) -> list[Split]:
    """The splits narrowed by the plan's partitions, topics, offsets and slots."""
    if plan.empty:
        return []
    out: list[Split] = []
    for s in splits:
        if plan.topics is not None and s.topic not in plan.topics:
            continue
        if plan.partitions is not None and s.partition not in plan.partitions:
            continue
        start = max(s.start, plan.offset_start)
        stop = s.stop if plan.offset_stop is None else min(s.stop, plan.offset_stop)
        ranges = list(s.ranges) if plan.slot_ranges is None else intersect_ranges(
            s.ranges, plan.slot_ranges)
        if start < stop and ranges:
            out.append(Split(s.topic, s.partition, tuple(ranges), start, stop))
    return out
