"""Tests for sdk/core/filters.py: the Databus-style RANGE/MOD key filters.

Goal: show that the one parser reads the list notation exactly as DESIGN.md says
(``a-b`` half-open), rejects every bad input with a message naming the entry,
and that the batch evaluator passes exactly the keys the rules say.

Method: the worked examples from DESIGN.md checked at every boundary; hypothesis
properties that (1) a partition of all buckets, or of a span of range ids, into
lists written in random but equivalent notation passes every key exactly once,
and (2) `evaluate` agrees with a small per-key reference model written here from
the rules (not from the module's code), for random specs, keys and sources, so
that every compiled lookup (byte table, bisect, single interval) is covered;
plus one test per validation error, round trips through protobuf, the CLI form
and the Databus config properties.
"""

from __future__ import annotations

import pickle
import re
from itertools import pairwise

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.core.columns import keys_of
from sdk.core.filters import (
    ID_LIST_ENTRIES_MAX,
    INT64_MAX,
    MOD_TABLE_BUCKETS_MAX,
    FilterError,
    FilterResult,
    FilterType,
    KeyFilterSpec,
    evaluate,
    explain,
    format_id_list,
    from_config,
    is_integer_text,
    parse_id_list,
)
from sdk.core.pb import keybus_pb2 as pb

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


# ---------------------------------------------------------------------------
# Worked examples (DESIGN.md)

RANGE_EXAMPLE = KeyFilterSpec.parse_cli("range:5000000:[1,3-6]")
MOD_EXAMPLE = KeyFilterSpec.parse_cli("mod:2:[0]")


@pytest.mark.parametrize(("key", "passes"), [
    (0, False), (4_999_999, False), (5_000_000, True), (9_999_999, True), (10_000_000, False),
    (14_999_999, False), (15_000_000, True), (29_999_999, True), (30_000_000, False),
    (-5_000_000, False),
])
def test_range_example_boundaries(key: int, passes: bool) -> None:
    expected = [0] if passes else []
    assert evaluate(RANGE_EXAMPLE, [key]).passed == expected
    assert evaluate(RANGE_EXAMPLE, [str(key)]).passed == expected


def test_range_example_passes_exactly_the_two_spans() -> None:
    keys: list[int | str] = [*range(0, 35 * M, 1000), *range(4_999_990, 5_000_010)]
    expected = [k for k in keys if 5 * M <= int(k) < 10 * M or 15 * M <= int(k) < 30 * M]
    assert passing_keys(RANGE_EXAMPLE, keys) == expected
    assert RANGE_EXAMPLE.range_ids == ((1, 2), (3, 6))


def test_mod_example_passes_the_even_keys_including_negatives() -> None:
    keys: list[int | str] = list(range(-1001, 1002))
    assert passing_keys(MOD_EXAMPLE, keys) == [k for k in keys if int(k) % 2 == 0]
    assert passing_keys(MOD_EXAMPLE, [INT64_MIN, INT64_MAX, -7, "-8"]) == [INT64_MIN, "-8"]


def test_explain_states_the_examples_in_plain_english() -> None:
    assert explain(RANGE_EXAMPLE) == (
        "RANGE size 5,000,000, ids [1,3-6]: keys 5,000,000..9,999,999 and "
        "15,000,000..29,999,999 pass; non-integer string keys never pass.")
    assert explain(MOD_EXAMPLE) == (
        "MOD numBuckets 2, buckets [0]: keys whose abs(key) % 2 is 0 pass (even keys); "
        "non-integer string keys use murmur3 % 2.")


def test_explain_other_shapes() -> None:
    assert "(odd keys)" in explain(KeyFilterSpec.parse_cli("mod:2:[1]"))
    assert "(every key)" in explain(KeyFilterSpec.parse_cli("mod:3:[0-3]"))
    assert "is 0 or 2..4 pass;" in explain(KeyFilterSpec.parse_cli("mod:10:[0,2-5]"))
    many = explain(KeyFilterSpec.parse_cli("mod:100:[" + ",".join(map(str, range(0, 40, 2))) + "]"))
    assert "is 0, 2, 4, 6, 8, 10, 12, 14 or 12 more pass" in many
    assert explain(KeyFilterSpec.parse_cli("none")) == "NONE: every key passes."
    scoped = explain(KeyFilterSpec.parse_cli("range:10:[0]@b,a"))
    assert scoped.endswith("Applies only to events from sources a, b; events from other "
                           "sources pass.")


# ---------------------------------------------------------------------------
# Partition properties: every key passes exactly one owner's filter


@settings(max_examples=150, deadline=None)
@given(partition=partition_lists(500), keys=st.lists(keys_any, max_size=40))
def test_mod_partition_passes_every_key_exactly_once(
        partition: tuple[int, list[str]], keys: list[int | str]) -> None:
    num_buckets, bucket_lists = partition
    counts = [0] * len(keys)
    for text in bucket_lists:
        spec = KeyFilterSpec.from_proto(pb.KeyFilter(
            type=pb.KeyFilter.MOD, mod_num_buckets=num_buckets, mod_buckets=text))
        result = evaluate(spec, keys)
        assert result.non_integer_rejected == 0
        for i in result.passed:
            counts[i] += 1
    assert counts == [1] * len(keys)


@settings(max_examples=150, deadline=None)
@given(partition=partition_lists(60), size=st.integers(1, 10 * M), data=st.data())
def test_range_partition_passes_every_key_in_the_span_exactly_once(
        partition: tuple[int, list[str]], size: int, data: st.DataObject) -> None:
    id_count, id_lists = partition
    span_stop = id_count * size
    inside = st.integers(0, span_stop - 1)
    keys: list[int | str] = data.draw(st.lists(st.one_of(inside, inside.map(str)), max_size=40))
    outside: list[int | str] = [-1, span_stop, span_stop + size, INT64_MIN, "x", "-3"]
    counts = [0] * len(keys)
    for text in id_lists:
        spec = KeyFilterSpec.parse_cli(f"range:{size}:{text}")
        for i in evaluate(spec, keys).passed:
            counts[i] += 1
        assert evaluate(spec, outside).passed == []
    assert counts == [1] * len(keys)


# ---------------------------------------------------------------------------
# The evaluator against the reference model

sources_of = st.sampled_from(["a", "b", "c", ""])


@settings(max_examples=400, deadline=None)
@given(spec=specs(), keys=st.lists(keys_any, max_size=30), data=st.data())
def test_evaluate_agrees_with_the_reference(
        spec: KeyFilterSpec, keys: list[int | str], data: st.DataObject) -> None:
    shape = data.draw(st.sampled_from(["none", "empty", "one", "each"]))
    column: list[str] | None
    if shape == "none":
        column, per_event = None, [""] * len(keys)
    elif shape == "empty":
        column, per_event = [], [""] * len(keys)
    elif shape == "one":
        column = [data.draw(sources_of)]
        per_event = column * len(keys)
    else:
        column = data.draw(st.lists(sources_of, min_size=len(keys), max_size=len(keys)))
        per_event = column
    result = evaluate(spec, keys, column)
    expected = [i for i, key in enumerate(keys) if reference_passes(spec, key, per_event[i])]
    assert result == FilterResult(expected, reference_rejected(spec, keys, per_event))


@given(spec=specs(), keys=st.lists(int64s, max_size=30))
def test_int_keys_from_a_protobuf_batch(spec: KeyFilterSpec, keys: list[int]) -> None:
    batch = pb.EventBatch(count=len(keys), key_ints=keys, values=[b""] * len(keys))
    direct = evaluate(spec, batch.key_ints)
    assert direct == evaluate(spec, keys_of(batch))
    assert direct.passed == [i for i, key in enumerate(keys) if reference_passes(spec, key, "")]


# ---------------------------------------------------------------------------
# Keys: integer-valued strings and the rest


@pytest.mark.parametrize("text", ["42", "-7", "+7", "007", "-0", "9223372036854775807",
                                  "-9223372036854775808", "0000000000000000000000042"])
def test_integer_valued_strings_count_as_integers(text: str) -> None:
    assert is_integer_text(text)
    number = int(text)
    for spec in [MOD_EXAMPLE, KeyFilterSpec.parse_cli("mod:7:[0-3]"), RANGE_EXAMPLE,
                 KeyFilterSpec.parse_cli("range:1:[0-100]")]:
        assert evaluate(spec, [text]) == evaluate(spec, [number])


@pytest.mark.parametrize("text", ["", "abc", " 42", "42 ", "4.2", "1_000", "1e3", "--1", "+",
                                  "\u0664\u0662", "12345678901234567890", "0x10"])
def test_other_strings_are_not_integers(text: str) -> None:
    assert not is_integer_text(text)
    assert evaluate(RANGE_EXAMPLE, [text, 5 * M]) == FilterResult([1], 1)
    bucket = mmh3.hash(text, 0, signed=False) % 7
    spec = KeyFilterSpec.parse_cli(f"mod:7:[{bucket}]")
    assert evaluate(spec, [text]) == FilterResult([0], 0)
    assert evaluate(KeyFilterSpec.parse_cli(f"mod:7:[{(bucket + 1) % 7}]"), [text]).passed == []


def test_range_counts_the_non_integer_strings_it_rejects() -> None:
    keys: list[int | str] = [5 * M, "abc", "5000000", "xyz", -1, 1, "4.2"]
    assert evaluate(RANGE_EXAMPLE, keys) == FilterResult([0, 2], 3)
    assert evaluate(MOD_EXAMPLE, ["abc"]).non_integer_rejected == 0


def test_mod_beyond_the_table_uses_the_same_buckets() -> None:
    n = MOD_TABLE_BUCKETS_MAX + 10
    spec = KeyFilterSpec.parse_cli(f"mod:{n}:[5,{n - 3}-{n}]")
    keys: list[int | str] = [5, -5, n + 5, n - 1, -(n - 2), n - 4, 4, 6, 0]
    assert passing_keys(spec, keys) == [5, -5, n + 5, n - 1, -(n - 2)]


def test_none_passes_everything() -> None:
    spec = KeyFilterSpec.parse_cli(" NONE ")
    assert spec.is_none
    assert evaluate(spec, [1, "x", -3], ["a", "b", "c"]) == FilterResult([0, 1, 2], 0)
    assert evaluate(spec, []) == FilterResult([], 0)
    assert KeyFilterSpec.from_proto(pb.KeyFilter()).is_none


# ---------------------------------------------------------------------------
# Sources


def test_sources_scope_the_filter() -> None:
    spec = KeyFilterSpec.parse_cli("range:10:[0]@orders")
    keys: list[int | str] = [5, 50, "x", 50, "y"]
    sources = ["orders", "orders", "orders", "members", "members"]
    assert evaluate(spec, keys, sources) == FilterResult([0, 3, 4], 1)
    assert evaluate(spec, keys, ["orders"]) == FilterResult([0], 2)
    assert evaluate(spec, keys, ["members"]) == FilterResult([0, 1, 2, 3, 4], 0)
    assert evaluate(spec, keys, []) == FilterResult([0, 1, 2, 3, 4], 0)
    assert evaluate(spec, keys) == FilterResult([0, 1, 2, 3, 4], 0)
    assert evaluate(spec, keys, ["orders"] * 5) == FilterResult([0], 2)


def test_unscoped_filter_applies_to_every_source() -> None:
    spec = KeyFilterSpec.parse_cli("mod:2:[1]")
    assert evaluate(spec, [1, 2, 3], ["a", "b", "c"]).passed == [0, 2]


# ---------------------------------------------------------------------------
# Parsing, rendering and round trips


@pytest.mark.parametrize(("text", "intervals"), [
    ("[1,3-6]", ((1, 2), (3, 6))),
    (" [ 5 - 6 , 0 ] ", ((0, 1), (5, 6))),
    ("[0,1,2]", ((0, 3),)),
    ("[2-5,3-8,8]", ((2, 9),)),
    ("[7,7]", ((7, 8),)),
])
def test_parse_id_list_merges_and_sorts(text: str, intervals: tuple[tuple[int, int], ...]) -> None:
    assert parse_id_list(text, "range.partitions") == intervals


@given(ids=st.sets(st.integers(0, 300), min_size=1), data=st.data())
def test_list_notation_round_trips(ids: set[int], data: st.DataObject) -> None:
    intervals = parse_id_list(data.draw(id_list_text(sorted(ids))), "mod.buckets")
    assert {i for start, stop in intervals for i in range(start, stop)} == ids
    assert parse_id_list(format_id_list(intervals), "mod.buckets") == intervals


@given(spec=specs())
def test_proto_and_pickle_round_trips(spec: KeyFilterSpec) -> None:
    assert KeyFilterSpec.from_proto(spec.to_proto()) == spec
    copy = pickle.loads(pickle.dumps(spec))
    assert copy == spec
    assert evaluate(copy, [0, 1, 5 * M, "x"]) == evaluate(spec, [0, 1, 5 * M, "x"])


def test_cli_forms() -> None:
    spec = KeyFilterSpec.parse_cli("MOD:4:[0,2-4]@ a , b ")
    assert spec == KeyFilterSpec(FilterType.MOD, num_buckets=4, buckets=((0, 1), (2, 4)),
                                 sources=frozenset({"a", "b"}))
    assert KeyFilterSpec.parse_cli("range : 5000000 : [1,3-6]") == RANGE_EXAMPLE


def test_from_proto_ignores_the_other_types_fields() -> None:
    message = pb.KeyFilter(type=pb.KeyFilter.MOD, mod_num_buckets=2, mod_buckets="[0]",
                           range_size=-5, range_partitions="junk")
    assert KeyFilterSpec.from_proto(message) == MOD_EXAMPLE


def test_spec_is_hashable_and_compares_by_value() -> None:
    again = KeyFilterSpec(FilterType.RANGE, range_size=5 * M, range_ids=((3, 6), (1, 2)))
    assert again == RANGE_EXAMPLE
    assert len({again, RANGE_EXAMPLE}) == 1


# ---------------------------------------------------------------------------
# Validation errors: each names the entry and the allowed form


@pytest.mark.parametrize(("text", "message"), [
    ("range:0:[1]", "range.size 0: need a positive integer"),
    ("range:-5:[1]", "range.size '-5': need a positive integer"),
    ("range:abc:[1]", "range.size 'abc': need a positive integer"),
    ("range:9223372036854775808:[1]", "range.size 9223372036854775808: need a positive"),
    ("mod:0:[0]", "mod.numBuckets 0: need a positive integer"),
    ("mod:2:[-1]", "mod.buckets entry '-1': negative ids are not allowed"),
    ("range:5:[1--3]", "range.partitions entry '1--3': negative ids are not allowed"),
    ("mod:9:[5-3]", "mod.buckets entry '5-3': need a < b in a-b (half-open [a, b))"),
    ("mod:9:[4-4]", "mod.buckets entry '4-4': need a < b in a-b"),
    ("mod:2:[2]", "mod.buckets entry '2': ids must be below 2"),
    ("mod:4:[0,2-5]", "mod.buckets entry '2-5': ids must be below 4 (numBuckets); need a < 4, "
                      "and b <= 4 in a-b"),
    ("mod:2:[0,x]", "mod.buckets entry 'x': does not parse; need ids a or half-open ranges a-b"),
    ("range:5:[1,,2]", "range.partitions entry '': does not parse"),
    ("range:5:[1-]", "range.partitions entry '1-': does not parse"),
    ("range:5:[1.5]", "range.partitions entry '1.5': does not parse"),
    ("range:5:[12345678901234567890]", "entry '12345678901234567890': does not parse"),
    ("range:5:[]", "range.partitions '[]': the list is empty"),
    ("range:5:[ ]", "range.partitions '[ ]': the list is empty"),
    ("range:5:1,2", "range.partitions '1,2': need a list of ids a or half-open ranges"),
    ("range:5:[1", "range.partitions '[1': need a list"),
    ("range:5:", "range.partitions '': need a list"),
    ("range", "filter 'range': need 'none', 'range:SIZE:[ids]' or 'mod:NUM_BUCKETS:[buckets]'"),
    ("range:5", "filter 'range:5': need 'none'"),
    ("hash:5:[1]", "filter 'hash:5:[1]': need 'none'"),
    ("none:5", "filter 'none:5': need 'none'"),
    ("", "filter '': need 'none'"),
    ("mod:2:[0]@a,,b", "filter 'mod:2:[0]@a,,b': empty source name after '@'"),
])
def test_bad_cli_filters_are_rejected_naming_the_entry(text: str, message: str) -> None:
    with pytest.raises(FilterError) as raised:
        KeyFilterSpec.parse_cli(text)
    assert message in str(raised.value)


def test_too_many_entries_is_rejected() -> None:
    text = "[" + ",".join(["0"] * (ID_LIST_ENTRIES_MAX + 1)) + "]"
    with pytest.raises(FilterError, match="entries is over the limit"):
        parse_id_list(text, "mod.buckets")
    assert parse_id_list(text[:-3] + "]", "mod.buckets") == ((0, 1),)


@pytest.mark.parametrize(("message_fields", "message"), [
    ({"type": pb.KeyFilter.RANGE, "range_size": 0, "range_partitions": "[1]"},
     "range.size 0: need a positive integer"),
    ({"type": pb.KeyFilter.RANGE, "range_size": 5}, "range.partitions '': need a list"),
    ({"type": pb.KeyFilter.MOD, "mod_num_buckets": -2, "mod_buckets": "[0]"},
     "mod.numBuckets -2: need a positive integer"),
    ({"type": pb.KeyFilter.MOD, "mod_num_buckets": 3, "mod_buckets": "[3]"},
     "mod.buckets entry '3': ids must be below 3"),
    ({"type": 7}, "type 7: need NONE (0), RANGE (1) or MOD (2)"),
])
def test_bad_protos_are_rejected(message_fields: dict[str, int | str], message: str) -> None:
    with pytest.raises(FilterError) as raised:
        KeyFilterSpec.from_proto(pb.KeyFilter(**message_fields))  # type: ignore[arg-type]
    assert message in str(raised.value)


@pytest.mark.parametrize(("fields", "message"), [
    ({"range_size": 5, "range_ids": ()}, "range.partitions: the list is empty"),
    ({"range_size": 5, "range_ids": ((3, 1),)}, "range.partitions entry '3-1': need a < b"),
    ({"range_size": 5, "range_ids": ((-1, 1),)}, "range.partitions entry '-1-1': negative"),
    ({"range_size": 0, "range_ids": ((0, 1),)}, "range.size 0: need a positive integer"),
])
def test_direct_construction_validates(fields: dict[str, object], message: str) -> None:
    with pytest.raises(FilterError) as raised:
        KeyFilterSpec(FilterType.RANGE, **fields)  # type: ignore[arg-type]
    assert message in str(raised.value)


def test_filter_error_is_a_value_error() -> None:
    assert issubclass(FilterError, ValueError)


# ---------------------------------------------------------------------------
# Databus config properties

PREFIX = "serversidefilter.filter"


def test_from_config_reads_each_source() -> None:
    specs_by_source = from_config({
        f"{PREFIX}(members).type": "RANGE",
        f"{PREFIX}(members).range.size": "5000000",
        f"{PREFIX}(members).range.partitions": "[1,3-6]",
        f"{PREFIX}(orders).type": "mod",
        f"{PREFIX}(orders).mod.numBuckets": " 2 ",
        f"{PREFIX}(orders).mod.buckets": "[0]",
        f"{PREFIX}(orders).range.size": "ignored for MOD",
        f"{PREFIX}(plain).type": "NONE",
        f"{PREFIX}(defaulted).mod.numBuckets": "2",
        "relay.port": "11111",
    })
    assert specs_by_source == {
        "members": KeyFilterSpec(FilterType.RANGE, range_size=5 * M,
                                 range_ids=((1, 2), (3, 6)), sources=frozenset({"members"})),
        "orders": KeyFilterSpec(FilterType.MOD, num_buckets=2, buckets=((0, 1),),
                                sources=frozenset({"orders"})),
        "plain": KeyFilterSpec(FilterType.NONE, sources=frozenset({"plain"})),
        "defaulted": KeyFilterSpec(FilterType.NONE, sources=frozenset({"defaulted"})),
    }
    members = specs_by_source["members"]
    assert evaluate(members, [5 * M, 5 * M], ["members", "orders"]).passed == [0, 1]
    assert evaluate(members, [1, 1], ["members", "orders"]).passed == [1]


@pytest.mark.parametrize(("props", "message"), [
    ({f"{PREFIX}(a).kind": "MOD"}, f"{PREFIX}(a).kind: unknown property"),
    ({f"{PREFIX}(a).mod.numbuckets": "2"}, f"{PREFIX}(a).mod.numbuckets: unknown property"),
    ({"serversidefilter.filter.a.type": "MOD"}, "serversidefilter.filter.a.type: unknown"),
    ({f"{PREFIX}(a).type": "HASH"}, f"{PREFIX}(a).type 'HASH': need RANGE, MOD or NONE"),
    ({f"{PREFIX}(a).type": "MOD", f"{PREFIX}(a).mod.buckets": "[0]"},
     f"{PREFIX}(a).mod.numBuckets: missing; a MOD filter needs it"),
    ({f"{PREFIX}(a).type": "RANGE", f"{PREFIX}(a).range.size": "10"},
     f"{PREFIX}(a).range.partitions: missing; a RANGE filter needs it"),
    ({f"{PREFIX}(a).type": "RANGE", f"{PREFIX}(a).range.size": "0",
      f"{PREFIX}(a).range.partitions": "[0]"}, f"{PREFIX}(a).range.size 0: need a positive"),
    ({f"{PREFIX}(a).type": "MOD", f"{PREFIX}(a).mod.numBuckets": "2",
      f"{PREFIX}(a).mod.buckets": "[0-3]"},
     f"{PREFIX}(a).mod.buckets entry '0-3': ids must be below 2"),
    ({f"{PREFIX}(a).type": "MOD", f"{PREFIX}(a).mod.numBuckets": "two",
      f"{PREFIX}(a).mod.buckets": "[0]"}, f"{PREFIX}(a).mod.numBuckets 'two': need a positive"),
])
def test_bad_config_is_rejected_naming_the_property(props: dict[str, str], message: str) -> None:
    with pytest.raises(FilterError) as raised:
        from_config(props)
    assert message in str(raised.value)


# ---------------------------------------------------------------------------
# The vectorized int64 path against the plain loop


INT64_MIN = -(1 << 63)


@given(
    spec=st.one_of(
        st.builds(lambda n, b: KeyFilterSpec.parse_cli(f"mod:{n}:[{b % n}]"),
                  st.integers(1, 200_000), st.integers(0, 10**6)),
        st.builds(lambda size, lo, width: KeyFilterSpec.parse_cli(f"range:{size}:[{lo}-{lo + width}]"),
                  st.integers(1, 10**12), st.integers(0, 10**6), st.integers(1, 5)),
    ),
    keys=st.lists(st.one_of(st.integers(INT64_MIN, INT64_MAX), st.sampled_from([INT64_MIN, INT64_MAX, 0, -1])),
                  min_size=16, max_size=200),
)
def test_vectorized_int64_path_equals_the_loop(spec: KeyFilterSpec, keys: list[int]) -> None:
    from sdk.core import filters

    vectorized = filters._select_int64(spec, keys)
    loop = spec._select(keys)
    assert vectorized is None or vectorized == loop
    assert evaluate(spec, keys).passed == loop


def test_vectorized_path_is_used_for_int_batches_and_not_for_strings() -> None:
    from sdk.core import filters

    spec = KeyFilterSpec.parse_cli("mod:2:[0]")
    assert filters._select_int64(spec, list(range(100))) == list(range(0, 100, 2))
    assert filters._select_int64(spec, [*range(99), "7"]) is None  # numpy would read text
    assert filters._select_int64(spec, [*range(99), 1 << 70]) is None  # beyond int64
