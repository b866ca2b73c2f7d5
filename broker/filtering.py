"""Broker-side key filters: a read's or subscription's filter plus the
per-source filters of the broker's config, compiled into one batch selector.

An event passes when it passes the request's filter and the config filter of
its source (Databus `serversidefilter.filter(SOURCE)`). Non-integer string
keys that a RANGE filter rejects are counted in a Prometheus counter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from broker.errors import BrokerError
from broker.metrics import FILTER_NON_INTEGER_REJECTED
from broker.read_path import EventSelector
from sdk.core.columns import keys_of
from sdk.core.filters import FilterError, KeyFilterSpec, evaluate
from sdk.core.pb import keybus_pb2 as pb


def request_spec(key_filter: pb.KeyFilter) -> KeyFilterSpec | None:
    """Validate a request's filter; None when it filters nothing."""
    try:
        spec = KeyFilterSpec.from_proto(key_filter)
    except FilterError as e:
        raise BrokerError("filter_invalid", detail=f"filter: {e}") from None
    return None if spec.is_none else spec


def compile_selector(key_filter: pb.KeyFilter,
                     config_specs: Mapping[str, KeyFilterSpec]) -> EventSelector | None:
    """One selector for the request filter and the config's per-source filters."""
    specs = [s for s in config_specs.values() if not s.is_none]
    spec = request_spec(key_filter)
    if spec is not None:
        specs.append(spec)
    if not specs:
        return None

    def select(batch: pb.EventBatch) -> list[int]:
        # All-int batches (the common case) pass the packed column as is: no copy.
        keys: Sequence[int | str] = batch.key_ints if not batch.key_strings else keys_of(batch)
        sources = list(batch.sources) or None
        passed: list[int] | None = None
        for one in specs:
            result = evaluate(one, keys, sources)
            if result.non_integer_rejected:
                FILTER_NON_INTEGER_REJECTED.inc(result.non_integer_rejected)
            passed = result.passed if passed is None else sorted(set(passed) & set(result.passed))
        assert passed is not None
        return passed

    return select
