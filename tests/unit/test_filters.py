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

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdk.core.filters import (
    ID_LIST_ENTRIES_MAX,
    INT64_MAX,
    FilterError,
    FilterType,
    KeyFilterSpec,
    evaluate,
    explain,
    format_id_list,
    from_config,
    parse_id_list,
)
from sdk.core.pb import keybus_pb2 as pb
from tests.support.filter_model import (
    INT64_MIN,
    MOD_EXAMPLE,
    RANGE_EXAMPLE,
    M,
    id_list_text,
    passing_keys,
    specs,
)

# ---------------------------------------------------------------------------
# Worked examples (DESIGN.md)



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
