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
