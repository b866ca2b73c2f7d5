"""Prometheus metrics of relay chaining and leader election (served with the broker's).

The seed asks that a follower's metrics look like a broker's: the broker's
own metrics keep counting on a follower (reads, subscriptions); these add
what only a chain has.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge

if TYPE_CHECKING:
    from collections.abc import Mapping

    from broker.relay.acks import AckTracker
    from broker.relay.copy_state import CopyState

UPSTREAM_READ_AGE = Gauge("keybus_relay_seconds_since_upstream_read",
                          "Seconds since a follower last heard from its upstream for the "
                          "partition: records, or the answer an idle upstream sends each "
                          "relay_idle_answer_ms, 1 s (-1 = never)",
                          ["topic", "partition"])
UPSTREAM_REACHABLE = Gauge("keybus_relay_upstream_reachable",
                           "1 while a follower's copy of the partition reaches its upstream, "
                           "0 from a failed attempt or a lost stream until its next answer",
                           ["topic", "partition"])
FOLLOWER_LAG_EVENTS = Gauge("keybus_relay_follower_lag_events",
                            "Events the upstream holds that this follower does not yet",
                            ["topic", "partition"])
FOLLOWER_LAG_SECONDS = Gauge("keybus_relay_follower_lag_seconds",
                             "Seconds since this follower last held everything its upstream did",
                             ["topic", "partition"])
COPIED_EVENTS = Counter("keybus_relay_copied_events", "Events a follower copied from upstream",
                        ["topic"])
TRUNCATED_EVENTS = Counter("keybus_relay_truncated_events",
                           "Never-acknowledged events dropped because the leader lacks them",
                           ["topic"])
FOLLOWER_RESETS = Counter("keybus_relay_follower_resets",
                          "Times a follower's copy restarted at its upstream's start offset "
                          "(the upstream's retention removed offsets before they were copied)",
                          ["topic", "partition"])
LEADER_CHANGES = Counter("keybus_relay_leader_changes",
                         "Times this broker saw the topic's leader change", ["topic"])
IS_LEADER = Gauge("keybus_relay_is_leader",
                  "1 while this broker accepts produce for the topic (it leads it: elected, "
                  "static, or no [replication] entry for it), 0 on a follower or candidate",
                  ["topic"])


def drop_is_leader(topic: str) -> None:
    """Remove the topic's is_leader series, if it has one. Never raises: it runs in a
    topic's delete listeners, where an error would stop the delete half way."""
    with contextlib.suppress(KeyError):
        IS_LEADER.remove(topic)


ACK_WAITING = Gauge("keybus_relay_produces_waiting_for_copies",
                    "Produce answers held until enough followers hold the events", ["topic"])
FOLLOWERS_FOLLOWING = Gauge("keybus_relay_followers_following",
                            "On a leader with acks = n: followers with an open report stream "
                            "or in their grace (fewer than n refuse produce)",
                            ["topic", "partition"])


def export_acks(topic: str, trackers: Mapping[int, AckTracker[Any]], leading: bool,
                now_ms: float) -> None:
    """The leader's acks state as gauges. The following count is left out where it
    refuses nothing (acks = leader, or not leading now: a failed-over leader's last
    count would otherwise stay, for ever), as `keybus cluster status` shows "-" there.
    `now_ms`: the trackers' clock (time.monotonic)."""
    ACK_WAITING.labels(topic).set(sum(t.waiting for t in trackers.values()))
    for index, tracker in trackers.items():
        if leading and tracker.copies:
            FOLLOWERS_FOLLOWING.labels(topic, str(index)).set(tracker.following(now_ms))
        else:
            FOLLOWERS_FOLLOWING.remove(topic, str(index))


def export_copy(topic: str, partition: int, state: CopyState, log_end: int, now_ms: int,
                silence_ms: int = 3_000) -> None:
    """One partition's copy as gauges. Its lag is counted from the upstream end it last
    heard: before its first answer it knows none, and while its upstream is unreachable
    the end it knew is stale, so the lag series are left out then (a 0 would say
    "caught up"), as `keybus cluster status` shows "-" there.

    Why left out rather than the last value or NaN: the last value is most often 0
    (a follower is caught up when its upstream dies), the very lie; NaN makes every
    `lag > N` alert false as silently as an absent series, and this module already
    leaves the lag out before the first read. What an alert should watch instead is
    `keybus_relay_upstream_reachable == 0`, as Pulsar's operators watch
    `pulsar_replication_connected_count` (and Kafka's, a follower's failed fetches),
    or `keybus_relay_seconds_since_upstream_read`, which an idle but healthy upstream
    keeps near 1 s and which grows while nothing is heard. An upstream silent for
    longer than silence_ms (RelaySettings.upstream_silence_ms: frozen, its
    connection still open) counts as unreachable too."""
    labels = (topic, str(partition))
    UPSTREAM_READ_AGE.labels(*labels).set(
        (now_ms - state.last_read_ms) / 1000 if state.last_read_ms else -1)
    unheard = state.unheard_since_ms(now_ms, silence_ms)
    UPSTREAM_REACHABLE.labels(*labels).set(0 if unheard else 1)
    if not state.last_read_ms or unheard:
        FOLLOWER_LAG_EVENTS.remove(*labels)  # a new copy of the topic: its last lag is gone
        FOLLOWER_LAG_SECONDS.remove(*labels)
        return
    lag = max(state.upstream_end - log_end, 0)
    FOLLOWER_LAG_EVENTS.labels(*labels).set(lag)
    FOLLOWER_LAG_SECONDS.labels(*labels).set(
        (now_ms - state.caught_up_ms) / 1000 if lag and state.caught_up_ms else 0)


def forget_copy(topic: str, partition: int) -> None:
    """The broker copies this partition no more (it leads the topic now, or follows
    no one): its copy's series go, so a failed-over leader does not show the lag its
    last copy had, for ever."""
    labels = (topic, str(partition))
    for gauge in (UPSTREAM_READ_AGE, UPSTREAM_REACHABLE, FOLLOWER_LAG_EVENTS,
                  FOLLOWER_LAG_SECONDS):
        gauge.remove(*labels)
