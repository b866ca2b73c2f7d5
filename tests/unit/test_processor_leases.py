"""When a processor stops treating a claim as its own (sdk/processor/leases.py).

Goal: a claim lapses exactly when its last renewal (as sent) plus the
expiration is past, by the caller's `now_ms`, with no event or cycle needed;
the watcher's next wake-up is the first lapse; and the property that makes
it safe: whenever another processor's balancer may judge the record expired
(`balancer.is_live` false, the record stamped at or after the send, clocks
agreeing), the holder's lease has lapsed already.
Method: direct calls and hypothesis properties over times in ms; the old
code had no such decision outside the pump, which asked its own clock only
when a batch arrived (this module does not exist there: these tests fail).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sdk.processor.balancer import is_live
from sdk.processor.leases import lapsed_partitions, lease_lapsed, next_lapse_ms
from sdk.stores.records import PartitionOwnership

EXPIRATION = 2_000


def test_a_claim_lapses_once_its_last_renewal_plus_the_expiration_is_past() -> None:
    assert not lease_lapsed(10_000, EXPIRATION, 10_000)
    assert not lease_lapsed(10_000, EXPIRATION, 12_000)  # the last held millisecond
    assert lease_lapsed(10_000, EXPIRATION, 12_001)


def test_lapsed_partitions_are_those_past_their_lease_with_nothing_else_happening() -> None:
    renewals = {3: 10_000, 0: 9_000, 5: 11_500}
    assert lapsed_partitions(renewals, EXPIRATION, 10_500) == ()
    assert lapsed_partitions(renewals, EXPIRATION, 11_001) == (0,)
    assert lapsed_partitions(renewals, EXPIRATION, 12_001) == (0, 3)
    assert lapsed_partitions(renewals, EXPIRATION, 60_000) == (0, 3, 5)
    assert lapsed_partitions({}, EXPIRATION, 60_000) == ()


def test_the_watch_wakes_at_the_first_lapse() -> None:
    assert next_lapse_ms({}, EXPIRATION) is None
    renewals = {3: 10_000, 0: 9_000}
    first = next_lapse_ms(renewals, EXPIRATION)
    assert first == 11_001
    assert lapsed_partitions(renewals, EXPIRATION, first - 1) == ()
    assert lapsed_partitions(renewals, EXPIRATION, first) == (0,)


@given(renewals=st.dictionaries(st.integers(0, 63), st.integers(0, 10**9), max_size=16),
       expiration_ms=st.integers(1, 10**7), now_ms=st.integers(0, 2 * 10**9))
def test_lapsed_and_next_lapse_agree(renewals: dict[int, int], expiration_ms: int,
                                     now_ms: int) -> None:
    lapsed = lapsed_partitions(renewals, expiration_ms, now_ms)
    assert set(lapsed) == {p for p, at in renewals.items() if now_ms - at > expiration_ms}
    first = next_lapse_ms(renewals, expiration_ms)
    assert (first is not None and now_ms >= first) == bool(lapsed)


@given(renewed_at_ms=st.integers(0, 10**9), stamped_after_ms=st.integers(0, 10**6),
       expiration_ms=st.integers(1, 10**7), now_ms=st.integers(0, 2 * 10**9))
def test_the_holder_lets_go_no_later_than_another_may_take_over(
        renewed_at_ms: int, stamped_after_ms: int, expiration_ms: int, now_ms: int) -> None:
    record = PartitionOwnership("", "t", "g", 0, "holder", "e", renewed_at_ms + stamped_after_ms)
    if not is_live(record, now_ms, expiration_ms):
        assert lease_lapsed(renewed_at_ms, expiration_ms, now_ms)
