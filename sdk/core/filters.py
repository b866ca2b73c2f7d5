"""Databus-style server-side key filters: the one parser and the one batch evaluator.

A filter decides, from an event's primary key alone, whether the broker sends it
to a consumer, so filtered events never cross the network. Broker, SDK and CLI
all parse and evaluate filters here, so a filter means the same everywhere.

Rules:
1. List notation: ``[a]``, ``[a-b]`` and comma combinations such as ``[1,3-6]``.
   ``a-b`` is half-open ``[a, b)``. Ids are non-negative ASCII integers (at most
   19 digits), ``a < b``, the list is not empty, whitespace is ignored. For MOD
   every bucket is below numBuckets (so ``b <= numBuckets``). Overlapping or
   touching entries are merged.
2. RANGE (``range.size > 0``): id p passes keys in ``[p*size, (p+1)*size)``.
   Negative keys therefore never pass.
3. MOD (``mod.numBuckets > 0``): bucket = ``abs(key) % numBuckets``.
4. A string key that is an optional sign and ASCII digits (at most 19 after
   leading zeros, so every int64 in decimal) counts as that integer: ``"42"``
   is 42, ``"-7"`` is -7, ``"007"`` is 7. No other string does (``" 42"``,
   ``"4.2"``, ``"1_000"`` and longer digit strings are non-integer).
5. A non-integer string key never passes RANGE (the evaluator counts them, for
   the broker's metric). For MOD its bucket is
   ``mmh3.hash(key, 0, signed=False) % numBuckets`` (murmur3 x86 32-bit of the
   UTF-8 bytes, seed 0, unsigned).
6. A filter with ``sources`` applies only to events whose source is listed;
   every other event passes, including events without a source. No sources
   means the filter applies to every event.
7. NONE passes everything.

Errors in filter input raise `FilterError`, whose message names the field (or
config property) and the offending entry, and says what is allowed.

Cost: `evaluate` takes a whole batch. Each spec compiles its lookup once (a
bucket table, or sorted interval bounds searched with `bisect`) and runs it in
one list comprehension; a batch with string keys is first mapped to ints.

This module must not know about topics, partitions, subscriptions or I/O.
"""

from __future__ import annotations

import enum
import functools
import re
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import mmh3
import numpy as np
import numpy.typing as npt

from sdk.core.pb import keybus_pb2 as pb

ID_LIST_ENTRIES_MAX = 10_000
"""Most comma-separated entries one id list may have."""

MOD_TABLE_BUCKETS_MAX = 1 << 16
"""Up to this many buckets MOD uses a byte table (1 byte per bucket); above, a bisect."""

INT64_MAX = (1 << 63) - 1

IdIntervals = tuple[tuple[int, int], ...]
"""Sorted, disjoint, non-touching half-open intervals ((start, stop), ...)."""

_Selector = Callable[[Sequence[int]], list[int]]

_ID_ENTRY = re.compile(r"(-?[0-9]{1,19})(?:\s*-\s*(-?[0-9]{1,19}))?")
_INTEGER_TEXT = re.compile(r"[+-]?0*[0-9]{1,19}")
_POSITIVE_TEXT = re.compile(r"[0-9]{1,19}")
_LIST_FORM = "ids a or half-open ranges a-b ([a, b)), comma-separated in brackets, e.g. [1,3-6]"
_CLI_FORM = ("need 'none', 'range:SIZE:[ids]' or 'mod:NUM_BUCKETS:[buckets]', "
             "optionally followed by '@source1,source2', e.g. range:5000000:[1,3-6]")
_EXPLAIN_PARTS_MAX = 8


class FilterError(ValueError):
    """Filter input that breaks the rules; the message names the entry and the allowed form."""


class FilterType(enum.Enum):
    """The filter kinds; values are the Databus config and protobuf names."""

    NONE = "NONE"
    RANGE = "RANGE"
    MOD = "MOD"


_TYPE_OF_PROTO = {pb.KeyFilter.NONE: FilterType.NONE, pb.KeyFilter.RANGE: FilterType.RANGE,
                  pb.KeyFilter.MOD: FilterType.MOD}


# ---------------------------------------------------------------------------
# List notation


def parse_id_list(text: str, field: str, upper: int | None = None) -> IdIntervals:
    """Parse list notation such as ``[1,3-6]`` into merged, sorted half-open intervals.

    Args:
        text: the list; ``a-b`` is half-open ``[a, b)``.
        field: the field or config property named in errors, e.g. ``mod.buckets``.
        upper: if given, every id must be below it (MOD: numBuckets).

    Returns:
        ((start, stop), ...) sorted, with overlapping or touching entries merged.

    Raises:
        FilterError: naming the offending entry and the allowed form.
    """
    body = text.strip()
    if len(body) < 2 or body[0] != "[" or body[-1] != "]":
        raise FilterError(f"{field} {text!r}: need a list of {_LIST_FORM}")
    entries = body[1:-1].split(",")
    if len(entries) == 1 and not entries[0].strip():
        raise FilterError(f"{field} {text!r}: the list is empty; need at least one entry, "
                          f"e.g. [0] or [1,3-6]")
    if len(entries) > ID_LIST_ENTRIES_MAX:
        raise FilterError(f"{field}: {len(entries)} entries is over the limit of "
                          f"{ID_LIST_ENTRIES_MAX}; write neighbouring ids as one range a-b")
    return _merge([_parse_entry(entry.strip(), field, upper) for entry in entries])


def format_id_list(intervals: IdIntervals) -> str:
    """Render intervals in list notation; `parse_id_list` reads it back unchanged."""
    return "[" + ",".join(_format_interval(start, stop) for start, stop in intervals) + "]"


def _format_interval(start: int, stop: int) -> str:
    return str(start) if stop == start + 1 else f"{start}-{stop}"


def _parse_entry(entry: str, field: str, upper: int | None) -> tuple[int, int]:
    match = _ID_ENTRY.fullmatch(entry)
    if match is None:
        raise FilterError(f"{field} entry {entry!r}: does not parse; need {_LIST_FORM} "
                          f"(ids are integers >= 0 of at most 19 digits)")
    start = int(match[1])
    stop = start + 1 if match[2] is None else int(match[2])
    _check_interval(start, stop, entry, field, upper)
    return start, stop


def _check_interval(start: int, stop: int, entry: str, field: str, upper: int | None) -> None:
    if start < 0 or stop < 0:
        raise FilterError(f"{field} entry {entry!r}: negative ids are not allowed; need ids >= 0")
    if start >= stop:
        raise FilterError(f"{field} entry {entry!r}: need a < b in a-b (half-open [a, b))")
    if upper is not None and stop > upper:
        raise FilterError(f"{field} entry {entry!r}: ids must be below {upper} (numBuckets); "
                          f"need a < {upper}, and b <= {upper} in a-b (half-open [a, b))")


def _merge(intervals: list[tuple[int, int]]) -> IdIntervals:
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return tuple(merged)


def _validated(intervals: IdIntervals, field: str, upper: int | None) -> IdIntervals:
    """Intervals given as tuples (not text): the same checks, then merged."""
    if not intervals:
        raise FilterError(f"{field}: the list is empty; need at least one entry, e.g. [0]")
    for start, stop in intervals:
        _check_interval(start, stop, _format_interval(start, stop), field, upper)
    return _merge(list(intervals))


def _require_positive(value: int, field: str) -> None:
    if not 0 < value <= INT64_MAX:
        raise FilterError(f"{field} {value}: need a positive integer (1..{INT64_MAX})")


def _parse_positive(text: str, field: str) -> int:
    body = text.strip()
    if _POSITIVE_TEXT.fullmatch(body) is None:
        raise FilterError(f"{field} {text!r}: need a positive integer (1..{INT64_MAX})")
    value = int(body)
    _require_positive(value, field)
    return value


# ---------------------------------------------------------------------------
# The spec


@dataclass(frozen=True, slots=True)
class KeyFilterSpec:
    """A validated key filter; build it with `from_proto`, `parse_cli` or `from_config`.

    Fields of the other type stay at their defaults (RANGE uses range_size and
    range_ids, MOD num_buckets and buckets). Construction validates (raising
    FilterError), merges the intervals and compiles the lookup used by `evaluate`.
    """

    type: FilterType
    range_size: int = 0
    range_ids: IdIntervals = ()
    num_buckets: int = 0
    buckets: IdIntervals = ()
    sources: frozenset[str] = frozenset()
    _select: _Selector = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        assert isinstance(self.type, FilterType), f"type {self.type!r} is not a FilterType"
        object.__setattr__(self, "sources", frozenset(self.sources))
        if self.type is FilterType.RANGE:
            assert self.num_buckets == 0 and not self.buckets, "MOD fields on a RANGE filter"
            _require_positive(self.range_size, "range.size")
            object.__setattr__(self, "range_ids",
                               _validated(self.range_ids, "range.partitions", None))
        elif self.type is FilterType.MOD:
            assert self.range_size == 0 and not self.range_ids, "RANGE fields on a MOD filter"
            _require_positive(self.num_buckets, "mod.numBuckets")
            object.__setattr__(self, "buckets",
                               _validated(self.buckets, "mod.buckets", self.num_buckets))
        object.__setattr__(self, "_select", _compile(self))

    def __reduce__(self) -> tuple[Callable[..., KeyFilterSpec], tuple[object, ...]]:
        # Pickle the fields only; the compiled lookup is a closure and is rebuilt.
        return (KeyFilterSpec, (self.type, self.range_size, self.range_ids, self.num_buckets,
                                self.buckets, self.sources))

    @property
    def is_none(self) -> bool:
        """True when the filter passes every event."""
        return self.type is FilterType.NONE

    @classmethod
    def from_proto(cls, message: pb.KeyFilter) -> KeyFilterSpec:
        """Validate a protobuf KeyFilter; fields of the other type are ignored.

        Raises:
            FilterError: naming the field (range.size, range.partitions,
                mod.numBuckets, mod.buckets) and the offending entry.
        """
        kind = _TYPE_OF_PROTO.get(message.type)
        if kind is None:
            raise FilterError(f"type {message.type}: need NONE (0), RANGE (1) or MOD (2)")
        sources = frozenset(message.sources)
        if kind is FilterType.RANGE:
            return _build_spec(kind, message.range_size, message.range_partitions, sources,
                               ("range.size", "range.partitions"))
        if kind is FilterType.MOD:
            return _build_spec(kind, message.mod_num_buckets, message.mod_buckets, sources,
                               ("mod.numBuckets", "mod.buckets"))
        return cls(FilterType.NONE, sources=sources)

    def to_proto(self) -> pb.KeyFilter:
        """The protobuf form; `from_proto` reads it back equal."""
        message = pb.KeyFilter(type=pb.KeyFilter.Type.Value(self.type.value),
                               sources=sorted(self.sources))
        if self.type is FilterType.RANGE:
            message.range_size = self.range_size
            message.range_partitions = format_id_list(self.range_ids)
        elif self.type is FilterType.MOD:
            message.mod_num_buckets = self.num_buckets
            message.mod_buckets = format_id_list(self.buckets)
        return message

    @classmethod
    def parse_cli(cls, text: str) -> KeyFilterSpec:
        """Parse the CLI form: ``none``, ``range:SIZE:[ids]`` or ``mod:NUM_BUCKETS:[buckets]``.

        The type word is case-insensitive. An optional suffix ``@source1,source2``
        scopes the filter to those sources, e.g. ``mod:2:[0]@orders,members``.

        Raises:
            FilterError: on any other form, naming the text and the allowed forms.
        """
        body, at, source_text = text.partition("@")
        sources = _parse_cli_sources(source_text, text) if at else frozenset[str]()
        kind_text, _, rest = body.partition(":")
        kind = kind_text.strip().upper()
        if kind == "NONE" and not rest.strip():
            return cls(FilterType.NONE, sources=sources)
        size_text, separator, ids_text = rest.partition(":")
        if kind not in ("RANGE", "MOD") or not separator:
            raise FilterError(f"filter {text!r}: {_CLI_FORM}")
        labels = ("range.size", "range.partitions") if kind == "RANGE" else (
            "mod.numBuckets", "mod.buckets")
        size = _parse_positive(size_text, labels[0])
        return _build_spec(FilterType(kind), size, ids_text, sources, labels)


def _parse_cli_sources(source_text: str, text: str) -> frozenset[str]:
    names = [name.strip() for name in source_text.split(",")]
    if not all(names):
        raise FilterError(f"filter {text!r}: empty source name after '@'; {_CLI_FORM}")
    return frozenset(names)


def _build_spec(kind: FilterType, size: int, ids_text: str, sources: frozenset[str],
                labels: tuple[str, str]) -> KeyFilterSpec:
    """A RANGE (size = range.size) or MOD (size = numBuckets) spec; labels name the fields."""
    size_label, ids_label = labels
    _require_positive(size, size_label)
    if kind is FilterType.RANGE:
        ids = parse_id_list(ids_text, ids_label)
        return KeyFilterSpec(kind, range_size=size, range_ids=ids, sources=sources)
    assert kind is FilterType.MOD
    buckets = parse_id_list(ids_text, ids_label, upper=size)
    return KeyFilterSpec(kind, num_buckets=size, buckets=buckets, sources=sources)


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


def _compile(spec: KeyFilterSpec) -> _Selector:
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


# ---------------------------------------------------------------------------
# Explanation


def explain(spec: KeyFilterSpec) -> str:
    """Plain English of which keys pass, for the CLI and error pages."""
    if spec.type is FilterType.RANGE:
        text = _explain_range(spec)
    elif spec.type is FilterType.MOD:
        text = _explain_mod(spec)
    else:
        text = "NONE: every key passes."
    if spec.sources and not spec.is_none:
        text += (f" Applies only to events from sources {', '.join(sorted(spec.sources))}; "
                 f"events from other sources pass.")
    return text


def _explain_range(spec: KeyFilterSpec) -> str:
    size = spec.range_size
    spans = [f"{start * size:,}..{stop * size - 1:,}" for start, stop in spec.range_ids]
    return (f"RANGE size {size:,}, ids {format_id_list(spec.range_ids)}: "
            f"keys {_join(spans, 'and')} pass; non-integer string keys never pass.")


def _explain_mod(spec: KeyFilterSpec) -> str:
    n = spec.num_buckets
    buckets = spec.buckets
    parts = [str(start) if stop == start + 1 else f"{start}..{stop - 1}" for start, stop in buckets]
    note = ""
    if buckets == ((0, n),):
        note = " (every key)"
    elif n == 2:
        note = " (even keys)" if buckets == ((0, 1),) else " (odd keys)"
    return (f"MOD numBuckets {n:,}, buckets {format_id_list(buckets)}: keys whose "
            f"abs(key) % {n} is {_join(parts, 'or')} pass{note}; "
            f"non-integer string keys use murmur3 % {n}.")


def _join(parts: list[str], last_word: str) -> str:
    if len(parts) > _EXPLAIN_PARTS_MAX:
        parts = [*parts[:_EXPLAIN_PARTS_MAX], f"{len(parts) - _EXPLAIN_PARTS_MAX} more"]
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + f" {last_word} " + parts[-1]


# ---------------------------------------------------------------------------
# Broker config


CONFIG_PREFIX = "serversidefilter."
_CONFIG_NAMES = ("type", "range.size", "range.partitions", "mod.numBuckets", "mod.buckets")
_CONFIG_KEY = re.compile(r"serversidefilter\.filter\(([^()]+)\)\.(" +
                         "|".join(re.escape(name) for name in _CONFIG_NAMES) + ")")


def from_config(props: Mapping[str, str]) -> dict[str, KeyFilterSpec]:
    """Per-source filters from Databus config properties.

    Reads ``serversidefilter.filter(SOURCE).type`` (RANGE, MOD or NONE, the
    default; case-insensitive) and ``.range.size``, ``.range.partitions``,
    ``.mod.numBuckets``, ``.mod.buckets``. Properties of the other type are
    ignored, as in Databus; properties outside ``serversidefilter.`` too.

    Returns:
        source -> spec, each spec scoped to its own source.

    Raises:
        FilterError: naming the property key that is unknown, missing or bad.
    """
    per_source: dict[str, dict[str, tuple[str, str]]] = {}
    for key, value in props.items():
        if not key.startswith(CONFIG_PREFIX):
            continue
        match = _CONFIG_KEY.fullmatch(key)
        if match is None:
            raise FilterError(f"{key}: unknown property; use serversidefilter.filter(SOURCE).NAME "
                              f"with NAME one of {', '.join(_CONFIG_NAMES)}")
        per_source.setdefault(match[1], {})[match[2]] = (key, value)
    return {source: _spec_from_properties(source, entries)
            for source, entries in sorted(per_source.items())}


def _spec_from_properties(source: str, entries: dict[str, tuple[str, str]]) -> KeyFilterSpec:
    type_key, type_text = entries.get("type", ("", "NONE"))
    kind_name = type_text.strip().upper()
    if kind_name not in FilterType.__members__:
        raise FilterError(f"{type_key} {type_text!r}: need RANGE, MOD or NONE")
    kind = FilterType(kind_name)
    if kind is FilterType.NONE:
        return KeyFilterSpec(kind, sources=frozenset({source}))
    names = ("range.size", "range.partitions") if kind is FilterType.RANGE else (
        "mod.numBuckets", "mod.buckets")
    (size_key, size_text), (ids_key, ids_text) = (
        _required_property(entries, source, name, kind) for name in names)
    size = _parse_positive(size_text, size_key)
    return _build_spec(kind, size, ids_text, frozenset({source}), (size_key, ids_key))


def _required_property(entries: dict[str, tuple[str, str]], source: str, name: str,
                       kind: FilterType) -> tuple[str, str]:
    if name not in entries:
        raise FilterError(f"serversidefilter.filter({source}).{name}: missing; "
                          f"a {kind.value} filter needs it")
    return entries[name]
