"""Prometheus metrics of the broker (served on `metrics_port` when set)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

PRODUCED_EVENTS = Counter("keybus_produced_events", "Events appended to the log", ["topic"])
PRODUCE_COMMITS = Counter("keybus_produce_commits", "WriteBatches written (group commits)", ["topic"])
READ_EVENTS = Counter("keybus_read_events", "Events sent to readers", ["topic"])
FILTER_NON_INTEGER_REJECTED = Counter(
    "keybus_filter_non_integer_keys_rejected",
    "Events with a non-integer string key that a RANGE filter rejected")
PARTITION_END_OFFSET = Gauge("keybus_partition_end_offset", "Next offset to be written",
                             ["topic", "partition"])

# Subscriptions: labels are topic, subscription (and consumer where it applies).
# Set by each dispatcher after every round; removed when the subscription or
# consumer goes, so the label sets stay bounded by what is attached.
SUBSCRIPTION_BACKLOG = Gauge("keybus_subscription_backlog_events",
                             "Unacknowledged events of a subscription (per partition summed)",
                             ["topic", "subscription"])
SUBSCRIPTION_UNACKED = Gauge("keybus_subscription_unacked_events",
                             "Events sent to consumers and not yet acknowledged",
                             ["topic", "subscription"])
SUBSCRIPTION_WAITING_SLOTS = Gauge("keybus_subscription_waiting_slots",
                                   "Slots whose events wait (Key_Shared), by reason",
                                   ["topic", "subscription", "reason"])
SUBSCRIPTION_DISPATCH_RATE = Gauge("keybus_subscription_dispatch_rate",
                                   "Events dispatched per second, recent", ["topic", "subscription"])
CONSUMER_UNACKED = Gauge("keybus_consumer_unacked_events",
                         "Events a consumer holds unacknowledged",
                         ["topic", "subscription", "consumer"])
CONSUMER_DISPATCH_RATE = Gauge("keybus_consumer_dispatch_rate",
                               "Events dispatched to a consumer per second, recent",
                               ["topic", "subscription", "consumer"])
CONSUMER_PERMITS = Gauge("keybus_consumer_permits", "Permits a consumer granted and not used",
                         ["topic", "subscription", "consumer"])
DISPATCHED_EVENTS = Counter("keybus_dispatched_events", "Events sent to consumers (redeliveries too)",
                            ["topic", "subscription"])
REDELIVERED_EVENTS = Counter("keybus_redelivered_events", "Events sent again after a nack, "
                             "ack timeout or consumer loss", ["topic", "subscription"])
DEAD_LETTERED_EVENTS = Counter("keybus_dead_lettered_events",
                               "Events moved to a dead-letter topic", ["topic", "subscription"])

# Compacted view and bootstrap.
VIEW_LAG_EVENTS = Gauge("keybus_view_lag_events",
                        "Log events the compacted view has not folded in yet",
                        ["topic", "partition"])
VIEW_FOLDED_EVENTS = Counter("keybus_view_folded_events", "Log events folded into the view",
                             ["topic"])
VIEW_ERRORS = Counter("keybus_view_errors", "View maintenance passes that failed (retried)",
                      ["topic"])
BOOTSTRAP_SNAPSHOT_EVENTS = Counter("keybus_bootstrap_snapshot_events",
                                    "Snapshot events sent to bootstrapping clients", ["topic"])
