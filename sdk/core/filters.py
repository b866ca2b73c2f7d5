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

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sdk.core.filter_eval import (
    FilterResult,
    compile_selector,
    evaluate,
    is_integer_text,
)
from sdk.core.filter_ids import (
    ID_LIST_ENTRIES_MAX,
    MOD_TABLE_BUCKETS_MAX,
    FilterError,
    FilterType,
    IdIntervals,
    _parse_positive,
    _require_positive,
    _Selector,
    _validated,
    format_id_list,
    parse_id_list,
)
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.wire_ints import INT64_MAX

__all__ = ["CONFIG_PREFIX", "ID_LIST_ENTRIES_MAX", "INT64_MAX", "MOD_TABLE_BUCKETS_MAX",
           "FilterError", "FilterResult", "FilterType", "IdIntervals", "KeyFilterSpec",
           "evaluate", "explain", "format_id_list", "from_config", "is_integer_text",
           "parse_id_list"]

_CLI_FORM = ("need 'none', 'range:SIZE:[ids]' or 'mod:NUM_BUCKETS:[buckets]', "
             "optionally followed by '@source1,source2', e.g. range:5000000:[1,3-6]")
_EXPLAIN_PARTS_MAX = 8
_TYPE_OF_PROTO = {pb.KeyFilter.NONE: FilterType.NONE, pb.KeyFilter.RANGE: FilterType.RANGE,
                  pb.KeyFilter.MOD: FilterType.MOD}


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
        object.__setattr__(self, "_select", compile_selector(self))

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
