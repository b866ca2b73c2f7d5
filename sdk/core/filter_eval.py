"""Filter evaluation over a whole batch (rules 2-7 of `sdk.core.filters`).

Each spec compiles its lookup once (`compile_selector`: a bucket table, or
sorted interval bounds searched with `bisect`); `evaluate` runs it over a
batch, mapping string keys to ints first. `sdk.core.filters` re-exports the
public names. Pure: no I/O, nothing about topics or partitions.
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import mmh3
import numpy as np
import numpy.typing as npt

from sdk.core.filter_ids import (
    _INTEGER_TEXT,
    MOD_TABLE_BUCKETS_MAX,
    FilterType,
    IdIntervals,
    _Selector,
)
from sdk.core.wire_ints import INT64_MAX

if TYPE_CHECKING:
    from sdk.core.filters import KeyFilterSpec


# ---------------------------------------------------------------------------
# Evaluation


@dataclass(frozen=True, slots=True)
class FilterResult:
    """What a filter let through from one batch."""

    passed: list[int]
    """Positions in the batch of the events that pass, ascending."""
    non_integer_rejected: int
    """Non-integer string keys a RANGE filter rejected (0 for MOD and NONE)."""


def evaluate(spec: KeyFilterSpec, keys: Sequence[int | str],
             sources: Sequence[str] | None = None) -> FilterResult:
    """Apply a filter to a whole batch of primary keys.

    Args:
        spec: the filter.
        keys: the batch's primary keys (`columns.keys_of`).
        sources: the batch's sources column under the broadcast rule: 0 entries
            or None (no event has a source), 1 entry (every event's source) or
            one per key. Only matters when the spec lists sources.

    Returns:
        The ascending positions of passing events and the number of non-integer
        string keys a RANGE filter rejected.

    Runs on the partition task; no I/O.
    """
    if spec.is_none or not spec.sources:
        return _evaluate_keys(spec, keys)
    if not sources or len(sources) == 1:
        if sources and sources[0] in spec.sources:
            return _evaluate_keys(spec, keys)
        return FilterResult(list(range(len(keys))), 0)
    return _evaluate_scoped(spec, keys, sources)


def _evaluate_scoped(spec: KeyFilterSpec, keys: Sequence[int | str],
                     sources: Sequence[str]) -> FilterResult:
    """Per-event sources: filter the listed sources' events, pass the rest."""
    assert len(sources) == len(keys), "sources column must have 0, 1 or count entries"
    wanted = spec.sources
    scoped = [i for i, source in enumerate(sources) if source in wanted]
    if len(scoped) == len(keys):
        return _evaluate_keys(spec, keys)
    inner = _evaluate_keys(spec, [keys[i] for i in scoped])
    passed = [scoped[j] for j in inner.passed]
    passed.extend(i for i, source in enumerate(sources) if source not in wanted)
    passed.sort()  # two ascending runs: timsort merges them in linear time
    return FilterResult(passed, inner.non_integer_rejected)


def _evaluate_keys(spec: KeyFilterSpec, keys: Sequence[int | str]) -> FilterResult:
    # Int keys are the common case: a batch numpy reads as int64 is filtered in
    # one vectorized pass (about 9 ns a key instead of 60). Otherwise try the
    # compiled selector on the batch as it is: a string key makes abs() or the
    # int comparisons raise TypeError before anything is returned; then map the
    # batch to ints (rules 4, 5) and rerun.
    vectorized = _select_int64(spec, keys)
    if vectorized is not None:
        return FilterResult(vectorized, 0)
    try:
        return FilterResult(spec._select(cast("Sequence[int]", keys)), 0)
    except TypeError:
        pass
    if spec.type is FilterType.MOD:
        return FilterResult(spec._select(_mod_ints(keys, spec.num_buckets)), 0)
    ints, rejected = _range_ints(keys)
    return FilterResult(spec._select(ints), rejected)


def _select_int64(spec: KeyFilterSpec, keys: Sequence[int | str]) -> list[int] | None:
    """Passing positions computed with numpy, or None when the batch is not
    all int64 (numpy reads a batch with any str as text, and ints beyond
    int64 as objects) or the spec has no vectorized plan."""
    if len(keys) < _VECTOR_BATCH_MIN or spec.type is FilterType.NONE:
        return None
    plan = _vector_plan(spec)
    if plan is None:
        return None
    array = np.asarray(keys)
    if array.dtype != np.int64:
        return None
    if spec.type is FilterType.MOD:
        # abs() of INT64_MIN wraps to itself; read as uint64 it is 2**63, its true value.
        values = np.abs(array).view(np.uint64) % np.uint64(spec.num_buckets)
    else:
        values = array
    if plan.table is not None:
        hits = plan.table[values]
    else:
        assert plan.bounds is not None
        hits = np.searchsorted(plan.bounds, values, side="right") & 1
    result: list[int] = np.flatnonzero(hits).tolist()
    return result


_VECTOR_BATCH_MIN = 16
"""Below this many keys the plain loop is as fast as setting up numpy."""


@dataclass(frozen=True)
class _VectorPlan:
    table: npt.NDArray[np.bool_] | None  # MOD with a small bucket count
    bounds: npt.NDArray[Any] | None  # sorted [start0, stop0, start1, ...]


@functools.lru_cache(maxsize=256)
def _vector_plan(spec: KeyFilterSpec) -> _VectorPlan | None:
    if spec.type is FilterType.MOD:
        if spec.num_buckets <= MOD_TABLE_BUCKETS_MAX:
            table = np.zeros(spec.num_buckets, dtype=np.bool_)
            for start, stop in spec.buckets:
                table[start:stop] = True
            return _VectorPlan(table, None)
        return _VectorPlan(None, np.array(_bounds(spec.buckets, 1), dtype=np.uint64))
    bounds = _bounds(spec.range_ids, spec.range_size)
    if bounds[-1] > INT64_MAX:
        return None  # a stop past int64 cannot be stored as one; the loop handles it
    return _VectorPlan(None, np.array(bounds, dtype=np.int64))


def is_integer_text(key: str) -> bool:
    """True when a string key counts as an integer (rule 4)."""
    return _INTEGER_TEXT.fullmatch(key) is not None


def _mod_ints(keys: Sequence[int | str], num_buckets: int) -> list[int]:
    """Keys as ints for MOD: a non-integer string becomes its murmur3 bucket b,
    which selects the same bucket because abs(b) % num_buckets == b."""
    return [key if isinstance(key, int) else _mod_int_of_text(key, num_buckets) for key in keys]


def _mod_int_of_text(key: str, num_buckets: int) -> int:
    if is_integer_text(key):
        return int(key)
    return mmh3.hash(key, 0, signed=False) % num_buckets


def _range_ints(keys: Sequence[int | str]) -> tuple[list[int], int]:
    """Keys as ints for RANGE, and how many were non-integer strings. Those map
    to -1: every RANGE interval starts at 0 or above, so -1 never passes."""
    ints: list[int] = []
    rejected = 0
    for key in keys:
        if isinstance(key, int):
            ints.append(key)
        elif is_integer_text(key):
            ints.append(int(key))
        else:
            ints.append(-1)
            rejected += 1
    return ints, rejected


def compile_selector(spec: KeyFilterSpec) -> _Selector:
    if spec.type is FilterType.MOD:
        return _compile_mod(spec.num_buckets, spec.buckets)
    if spec.type is FilterType.RANGE:
        return _compile_range(spec.range_size, spec.range_ids)
    return _select_all


def _select_all(keys: Sequence[int]) -> list[int]:
    return list(range(len(keys)))


def _compile_mod(num_buckets: int, buckets: IdIntervals) -> _Selector:
    n = num_buckets
    if n <= MOD_TABLE_BUCKETS_MAX:
        table = bytearray(n)
        for start, stop in buckets:
            table[start:stop] = b"\x01" * (stop - start)

        def select_by_table(keys: Sequence[int]) -> list[int]:
            return [i for i, key in enumerate(keys) if table[abs(key) % n]]

        return select_by_table
    bounds = _bounds(buckets, 1)

    def select_by_bounds(keys: Sequence[int]) -> list[int]:
        return [i for i, key in enumerate(keys) if bisect_right(bounds, abs(key) % n) & 1]

    return select_by_bounds


def _compile_range(range_size: int, range_ids: IdIntervals) -> _Selector:
    bounds = _bounds(range_ids, range_size)
    if len(bounds) == 2:
        key_first, key_stop = bounds

        def select_one(keys: Sequence[int]) -> list[int]:
            return [i for i, key in enumerate(keys) if key_first <= key < key_stop]

        return select_one

    def select_many(keys: Sequence[int]) -> list[int]:
        return [i for i, key in enumerate(keys) if bisect_right(bounds, key) & 1]

    return select_many


def _bounds(intervals: IdIntervals, scale: int) -> list[int]:
    """[start0, stop0, start1, stop1, ...] times scale. As the intervals are
    sorted and disjoint, x is inside one exactly when bisect_right(bounds, x)
    (the count of bounds <= x) is odd."""
    return [bound * scale for interval in intervals for bound in interval]
