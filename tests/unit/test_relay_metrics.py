"""The copy's gauges: a follower that never read, or cannot reach its upstream now, has
no lag series (not 0, "caught up") and says whether it reaches its upstream; a broker that copies a partition no more (it leads now) drops them. The leader's
followers-following gauge exists only where it refuses produce (acks = n, leading).

Method: `export_copy` on copy states and `export_acks` on ack trackers, read back
from prometheus_client's registry.
"""

from __future__ import annotations

from prometheus_client import REGISTRY

from broker.relay.acks import AckTracker
from broker.relay.copy_state import CopyState
from broker.relay.metrics import export_acks, export_copy, forget_copy


def sample(name: str, partition: int) -> float | None:
    return REGISTRY.get_sample_value(name, {"topic": "metrics-t", "partition": str(partition)})


def test_a_copy_that_never_read_exports_no_lag_until_it_reads() -> None:
    export_copy("metrics-t", 0, CopyState(), log_end=0, now_ms=10_000)
    assert sample("keybus_relay_follower_lag_events", 0) is None
    assert sample("keybus_relay_follower_lag_seconds", 0) is None
    assert sample("keybus_relay_seconds_since_upstream_read", 0) == -1
    read = CopyState(upstream_end=50, last_read_ms=9_000, caught_up_ms=8_000)
    export_copy("metrics-t", 0, read, log_end=20, now_ms=10_000)
    assert sample("keybus_relay_follower_lag_events", 0) == 30
    assert sample("keybus_relay_follower_lag_seconds", 0) == 2
    assert sample("keybus_relay_seconds_since_upstream_read", 0) == 1


def test_a_new_copy_drops_the_lag_its_predecessor_left() -> None:
    read = CopyState(upstream_end=5, last_read_ms=9_000, caught_up_ms=9_000)
    export_copy("metrics-t", 1, read, log_end=5, now_ms=10_000)
    assert sample("keybus_relay_follower_lag_events", 1) == 0
    export_copy("metrics-t", 1, CopyState(), log_end=5, now_ms=11_000)  # the copy restarted
    assert sample("keybus_relay_follower_lag_events", 1) is None


def test_a_broker_that_copies_no_more_drops_its_copy_s_series() -> None:
    behind = CopyState(upstream_end=90, last_read_ms=9_000, caught_up_ms=5_000)
    export_copy("metrics-t", 2, behind, log_end=40, now_ms=10_000)
    assert sample("keybus_relay_follower_lag_events", 2) == 50
    forget_copy("metrics-t", 2)  # it became the leader: no lag of a copy to show
    for name in ("keybus_relay_follower_lag_events", "keybus_relay_follower_lag_seconds",
                 "keybus_relay_seconds_since_upstream_read"):
        assert sample(name, 2) is None, name
    forget_copy("metrics-t", 2)  # again (every second while it leads): nothing to remove


def test_a_leader_with_acks_n_exports_how_many_follow_and_drops_it_when_it_leads_no_more() -> None:
    trackers: dict[int, AckTracker[object]] = {0: AckTracker(2, 1_000), 1: AckTracker(2, 1_000)}
    first, second = object(), object()
    trackers[0].attach("b", first)
    trackers[0].attach("c", second)
    trackers[1].attach("b", first)
    export_acks("metrics-t", trackers, leading=True, now_ms=0)
    assert sample("keybus_relay_followers_following", 0) == 2
    assert sample("keybus_relay_followers_following", 1) == 1
    trackers[0].detach(second, now_ms=0)  # c's stream closed (its process gone)
    export_acks("metrics-t", trackers, leading=True, now_ms=999)
    assert sample("keybus_relay_followers_following", 0) == 2  # in its grace
    export_acks("metrics-t", trackers, leading=True, now_ms=1_000)
    assert sample("keybus_relay_followers_following", 0) == 1
    export_acks("metrics-t", trackers, leading=False, now_ms=1_000)  # failed over: a count would mislead
    assert sample("keybus_relay_followers_following", 0) is None
    assert sample("keybus_relay_followers_following", 1) is None


def test_acks_leader_exports_no_following_count() -> None:
    export_acks("metrics-t", {3: AckTracker(0)}, leading=True, now_ms=0)  # refuses nothing
    assert sample("keybus_relay_followers_following", 3) is None


def test_a_copy_whose_upstream_is_unreachable_exports_no_lag_and_says_so() -> None:
    state = CopyState()
    state.process_answer(upstream_end=40, log_end=40, now_ms=9_000)
    export_copy("metrics-t", 4, state, log_end=40, now_ms=9_500)
    assert sample("keybus_relay_follower_lag_events", 4) == 0
    assert sample("keybus_relay_upstream_reachable", 4) == 1
    state.process_lost("UNAVAILABLE: connection refused", now_ms=10_000)
    state.process_lost("UNAVAILABLE: connection refused", now_ms=11_000)  # keeps the first
    assert state.unreachable_since_ms == 10_000
    export_copy("metrics-t", 4, state, log_end=40, now_ms=12_000)
    assert sample("keybus_relay_follower_lag_events", 4) is None  # 0 was "caught up"
    assert sample("keybus_relay_follower_lag_seconds", 4) is None
    assert sample("keybus_relay_upstream_reachable", 4) == 0
    assert sample("keybus_relay_seconds_since_upstream_read", 4) == 3  # since last heard
    state.process_answer(upstream_end=45, log_end=40, now_ms=13_000)  # back, behind
    export_copy("metrics-t", 4, state, log_end=40, now_ms=13_000)
    assert sample("keybus_relay_upstream_reachable", 4) == 1
    assert sample("keybus_relay_follower_lag_events", 4) == 5
    forget_copy("metrics-t", 4)
    assert sample("keybus_relay_upstream_reachable", 4) is None


def test_an_upstream_silent_past_the_limit_counts_as_unreachable_until_it_answers() -> None:
    """Frozen with its connection open, an upstream's stream does not break for
    about 15 s (the keepalive); its idle answers stop at once."""
    state = CopyState()
    state.process_answer(upstream_end=40, log_end=40, now_ms=10_000)
    export_copy("metrics-t", 5, state, log_end=40, now_ms=13_000, silence_ms=3_000)
    assert sample("keybus_relay_upstream_reachable", 5) == 1  # silent 3 s: at the limit
    assert sample("keybus_relay_follower_lag_events", 5) == 0
    assert state.unheard_since_ms(13_001, 3_000) == 10_000  # since its last answer
    export_copy("metrics-t", 5, state, log_end=40, now_ms=13_001, silence_ms=3_000)
    assert sample("keybus_relay_upstream_reachable", 5) == 0
    assert sample("keybus_relay_follower_lag_events", 5) is None  # the last 0 is stale
    state.process_answer(upstream_end=41, log_end=40, now_ms=14_000)
    export_copy("metrics-t", 5, state, log_end=40, now_ms=14_000, silence_ms=3_000)
    assert sample("keybus_relay_upstream_reachable", 5) == 1
    assert sample("keybus_relay_follower_lag_events", 5) == 1
    state.done = True  # a catch-up copy that reached its stop reads no more: not an outage
    assert state.unheard_since_ms(60_000, 3_000) == 0
    forget_copy("metrics-t", 5)


def test_the_silence_limit_is_three_idle_answers_and_at_least_3_s() -> None:
    from broker.relay.settings import upstream_silence
    assert upstream_silence(1_000) == 3_000
    assert upstream_silence(200) == 3_000
    assert upstream_silence(5_000) == 15_000
