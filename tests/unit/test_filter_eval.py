"""Tests for the batch evaluator of the key filters (sdk/core/filter_eval.py).

Goal: `evaluate` passes exactly the keys the rules say, for every compiled
lookup (byte table, bisect, single interval) and the vectorized int64 path.
Method: hypothesis properties that (1) a partition of all buckets, or of a
span of range ids, into lists written in random but equivalent notation
passes every key exactly once, and (2) `evaluate` agrees with the reference
model in tests/support/filter_model.py (written from the rules, not from the
code) for random specs, keys and sources; plus integer-valued string keys,
sources, and the vectorized path against the plain loop.
"""

from __future__ import annotations

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.core.columns import keys_of
from sdk.core.filters import (
    INT64_MAX,
    MOD_TABLE_BUCKETS_MAX,
    FilterResult,
    KeyFilterSpec,
    evaluate,
    is_integer_text,
)
from sdk.core.pb import keybus_pb2 as pb
from tests.support.filter_model import (
    INT64_MIN,
    MOD_EXAMPLE,
    RANGE_EXAMPLE,
    M,
    int64s,
    keys_any,
    partition_lists,
    passing_keys,
    reference_passes,
    reference_rejected,
    specs,
)

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
# The vectorized int64 path against the plain loop





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
    from sdk.core import filter_eval as filters

    vectorized = filters._select_int64(spec, keys)
    loop = spec._select(keys)
    assert vectorized is None or vectorized == loop
    assert evaluate(spec, keys).passed == loop


def test_vectorized_path_is_used_for_int_batches_and_not_for_strings() -> None:
    from sdk.core import filter_eval as filters

    spec = KeyFilterSpec.parse_cli("mod:2:[0]")
    assert filters._select_int64(spec, list(range(100))) == list(range(0, 100, 2))
    assert filters._select_int64(spec, [*range(99), "7"]) is None  # numpy would read text
    assert filters._select_int64(spec, [*range(99), 1 << 70]) is None  # beyond int64
