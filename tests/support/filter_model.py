"""A reference model of the key filters and hypothesis strategies for their tests.

The model is written from the rules in DESIGN.md and the docstring of
sdk/core/filters.py, not from the module's code, so that tests comparing the
two (tests/unit/test_filter_eval.py) can fail. Shared by test_filters.py.
"""

from __future__ import annotations

import re
from itertools import pairwise

import mmh3
from hypothesis import strategies as st

from sdk.core.filters import (
    INT64_MAX,
    MOD_TABLE_BUCKETS_MAX,
    FilterType,
    KeyFilterSpec,
    evaluate,
)

M = 1_000_000
INT64_MIN = -INT64_MAX - 1

# ---------------------------------------------------------------------------
# A reference model, written from the rules in DESIGN.md and the module docstring


def reference_integer(key: int | str) -> int | None:
    if isinstance(key, int):
        return key
    if re.fullmatch(r"[+-]?[0-9]+", key) and len(key.lstrip("+-").lstrip("0")) <= 19:
        return int(key)
    return None


def reference_passes(spec: KeyFilterSpec, key: int | str, source: str) -> bool:
    if spec.is_none or (spec.sources and source not in spec.sources):
        return True
    number = reference_integer(key)
    if spec.type is FilterType.RANGE:
        size = spec.range_size
        return number is not None and any(
            start * size <= number < stop * size for start, stop in spec.range_ids)
    n = spec.num_buckets
    bucket = abs(number) % n if number is not None else mmh3.hash(str(key), 0, signed=False) % n
    return any(start <= bucket < stop for start, stop in spec.buckets)


def reference_rejected(spec: KeyFilterSpec, keys: list[int | str], sources: list[str]) -> int:
    if spec.type is not FilterType.RANGE:
        return 0
    return sum(1 for key, source in zip(keys, sources, strict=True)
               if reference_integer(key) is None
               and (not spec.sources or source in spec.sources))


# ---------------------------------------------------------------------------
# Strategies

int64s = st.integers(INT64_MIN, INT64_MAX)
integer_texts = st.builds(
    lambda sign, zeros, number: f"{sign}{'0' * zeros}{number}",
    st.sampled_from(["", "+", "-"]), st.integers(0, 3), st.integers(0, INT64_MAX))
keys_any = st.one_of(int64s, st.integers(-1000, 1000), st.text(max_size=12), integer_texts)


@st.composite
def id_list_text(draw: st.DrawFn, ids: list[int]) -> str:
    """The sorted ids in list notation, cut into random pieces in random order."""
    pieces: list[tuple[int, int]] = []
    run_start = ids[0]
    for previous, current in zip(ids, [*ids[1:], None], strict=True):
        if current == previous + 1:
            continue
        cuts = draw(st.sets(st.integers(run_start + 1, previous), max_size=3)) \
            if previous > run_start else set()
        bounds = [run_start, *sorted(cuts), previous + 1]
        pieces.extend(pairwise(bounds))
        run_start = current if current is not None else 0
    entries = [str(start) if stop == start + 1 and draw(st.booleans()) else f"{start}-{stop}"
               for start, stop in pieces]
    entries = draw(st.permutations(entries))
    space = draw(st.sampled_from(["", " ", "  "]))
    return "[" + space + f"{space},{space}".join(entries) + space + "]"


@st.composite
def partition_lists(draw: st.DrawFn, id_count_max: int) -> tuple[int, list[str]]:
    """(n, lists): ids 0..n-1 dealt to up to 6 owners, each owner's ids as a list."""
    n = draw(st.integers(1, id_count_max))
    owner_count = draw(st.integers(1, min(n, 6)))
    owners = draw(st.lists(st.integers(0, owner_count - 1), min_size=n, max_size=n))
    groups = [[i for i in range(n) if owners[i] == owner] for owner in range(owner_count)]
    return n, [draw(id_list_text(group)) for group in groups if group]


@st.composite
def interval_lists(draw: st.DrawFn, upper: int) -> tuple[tuple[int, int], ...]:
    """Random (possibly overlapping) half-open intervals inside 0..upper."""
    count = draw(st.integers(1, 5))
    intervals = []
    for _ in range(count):
        start = draw(st.integers(0, upper - 1))
        stop = draw(st.integers(start + 1, min(upper, start + 1 + draw(st.integers(0, 1 << 40)))))
        intervals.append((start, stop))
    return tuple(intervals)


@st.composite
def specs(draw: st.DrawFn) -> KeyFilterSpec:
    kind = draw(st.sampled_from(FilterType))
    sources = frozenset(draw(st.sets(st.sampled_from(["a", "b", "c"]), max_size=2)))
    if kind is FilterType.NONE:
        return KeyFilterSpec(kind, sources=sources)
    size = draw(st.one_of(st.integers(1, 100), st.integers(1, 10 * M), st.integers(1, INT64_MAX)))
    if kind is FilterType.RANGE:
        ids = draw(interval_lists(draw(st.integers(1, 1 << 62))))
        return KeyFilterSpec(kind, range_size=size, range_ids=ids, sources=sources)
    size = draw(st.one_of(st.integers(1, 500), st.just(MOD_TABLE_BUCKETS_MAX),
                          st.just(MOD_TABLE_BUCKETS_MAX + 1), st.just(size)))
    return KeyFilterSpec(kind, num_buckets=size, buckets=draw(interval_lists(size)),
                         sources=sources)


def passing_keys(spec: KeyFilterSpec, keys: list[int | str]) -> list[int | str]:
    return [keys[i] for i in evaluate(spec, keys).passed]


# Worked examples (DESIGN.md)
RANGE_EXAMPLE = KeyFilterSpec.parse_cli("range:5000000:[1,3-6]")
MOD_EXAMPLE = KeyFilterSpec.parse_cli("mod:2:[0]")
