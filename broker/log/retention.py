"""Which whole records retention removes. Pure: time and sizes are arguments.

Rules:
1. Only whole records go, oldest first: a record is one produce call, so a
   window is never cut in half.
2. The newest record always stays (like Kafka's active segment): it carries
   the partition's last offset and SCN across restarts.
3. By age: a record goes when publish_time_ms + retention_ms <= now_ms.
   By size: oldest records go while the partition holds more than
   retention_bytes. 0 disables either rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HeadRecord:
    base_offset: int
    count: int
    scn_first: int
    publish_time_ms: int
    size: int


@dataclass(frozen=True, slots=True)
class TrimPlan:
    """Delete records below stop_offset (and SCN index entries below stop_scn)."""

    stop_offset: int
    stop_scn: int
    bytes_removed: int
    records_removed: int


def plan_trim(head: Iterable[HeadRecord], now_ms: int, retention_ms: int,
              retention_bytes: int, partition_bytes: int) -> TrimPlan | None:
    """Walk records from the oldest; return what to delete, or None for nothing.

    `head` must be in offset order and may stop early; the walk stops at the
    first record that both rules keep.
    """
    if retention_ms <= 0 and retention_bytes <= 0:
        return None
    removed_bytes = removed = 0
    stop: HeadRecord | None = None
    records = iter(head)
    current = next(records, None)
    for following in records:  # `current` may go only if a newer record follows
        assert current is not None
        too_old = retention_ms > 0 and current.publish_time_ms + retention_ms <= now_ms
        too_big = retention_bytes > 0 and partition_bytes - removed_bytes > retention_bytes
        if not (too_old or too_big):
            break
        removed_bytes += current.size
        removed += 1
        stop = current = following
    if stop is None:
        return None
    return TrimPlan(stop.base_offset, stop.scn_first, removed_bytes, removed)
