"""Prometheus metrics of the broker (served on `metrics_port` when set)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

PRODUCED_EVENTS = Counter("keybus_produced_events", "Events appended to the log", ["topic"])
PRODUCE_COMMITS = Counter("keybus_produce_commits", "WriteBatches written (group commits)", ["topic"])
# One sample per fsync of the WAL syncer (broker/log/wal_sync.py; one fsync may cover
# several partitions' group commits). The tail shows the disk's stalls, which hold up every
# event that arrives during them (docs/latency.md, "What bounds it").
WAL_FSYNC_SECONDS = Histogram(
    "keybus_wal_fsync_seconds", "Length of each fsync of the write-ahead log for group commits",
    buckets=(0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
             5.0))
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
DISPATCH_CACHE_BYTES = Gauge("keybus_dispatch_cache_bytes",
                             "Memory of records all dispatchers keep read, as counted against "
                             "dispatch_cache_broker_bytes_max")
CONSUMER_OUTBOX_BYTES = Gauge("keybus_consumer_outbox_bytes",
                              "Bytes every consumer's outbox holds (queued, and the message "
                              "being written twice: gRPC's copy), as counted against "
                              "consumer_outbox_broker_bytes_max")
DISPATCHED_EVENTS = Counter("keybus_dispatched_events", "Events sent to consumers (redeliveries too)",
                            ["topic", "subscription"])
REDELIVERED_EVENTS = Counter("keybus_redelivered_events", "Events sent again after a nack, "
                             "ack timeout or consumer loss", ["topic", "subscription"])
DEAD_LETTERED_EVENTS = Counter("keybus_dead_lettered_events",
                               "Events moved to a dead-letter topic", ["topic", "subscription"])
DEAD_LETTER_FAILED_EVENTS = Counter(
    "keybus_dead_letter_failed_events", "Events whose move to a dead-letter topic failed, "
    "counted at each failed try (they are redelivered and tried again; the WARNING line says "
    "why)", ["topic", "subscription"])
# Set at start and whenever subscriptions are copied or deleted (dead_letter_watch.py).
DEAD_LETTER_CYCLES = Gauge("keybus_dead_letter_cycles",
                           "Dead-letter cycles among this broker's subscriptions, each named in "
                           "a WARNING log line; 0 = none")

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
# One sample per garbage collection of the broker process (broker/gc_pauses.py): the
# collector holds the GIL, so the event loop stops for as long as each takes.
GC_PAUSE_SECONDS = Histogram(
    "keybus_gc_pause_seconds", "Length of each garbage collection of the broker process "
    "(the event loop waits for it), by generation", ["generation"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1))
