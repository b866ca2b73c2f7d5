"""Pure rendering for the CLI: tables as rows, and the 0..65535 range bar.

No I/O here: functions return strings or rich renderables; `main.py` prints.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence

from rich.console import Group
from rich.table import Table

from sdk.core.hashing import SLOT_COUNT
from sdk.core.model import HashRange
from sdk.core.pb import keybus_pb2 as pb

BAR_WIDTH = 64


def range_bar(ranges: Iterable[HashRange], width: int = BAR_WIDTH) -> str:
    """Draw which slots a consumer owns: one cell per 65536/width slots.

    A cell is '█' when every slot in it is owned, '▌' when some are, '·' when none.
    """
    owned = [0] * width
    cell = SLOT_COUNT // width
    for r in ranges:
        for slot_cell in range(r.slot_first // cell, r.slot_last // cell + 1):
            lo = max(r.slot_first, slot_cell * cell)
            hi = min(r.slot_last, (slot_cell + 1) * cell - 1)
            owned[slot_cell] += hi - lo + 1
    return "".join("█" if n == cell else "▌" if n else "·" for n in owned)


def format_ranges(ranges: Sequence[HashRange]) -> str:
    return ",".join(str(r) for r in ranges) or "-"


def format_time_ms(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def topics_table(topics: Sequence[pb.TopicInfo]) -> Table:
    table = Table("topic", "partitions", "events", "bytes", "retention", "created (UTC)")
    for t in topics:
        events = sum(p.end_offset - p.start_offset for p in t.partitions)
        size = sum(p.bytes for p in t.partitions)
        table.add_row(t.topic, str(t.config.partitions), f"{events:,}", f"{size:,}",
                      retention_text(t.config), format_time_ms(t.created_ms))
    return table


def retention_text(config: pb.TopicConfig) -> str:
    parts = []
    if config.retention_ms:
        parts.append(f"{config.retention_ms / 1000:g}s")
    if config.retention_bytes:
        parts.append(f"{config.retention_bytes:,} B/partition")
    return ", ".join(parts) or "forever"


def partitions_table(topic: pb.TopicInfo) -> Table | Group:
    """The partitions, and below them the compacted view's state when there is one."""
    table = Table("partition", "start offset", "end offset", "events", "last scn", "bytes",
                  title=f"topic {topic.topic} (retention: {retention_text(topic.config)}"
                        f"{view_text(topic.config)})")
    for p in topic.partitions:
        table.add_row(str(p.partition), str(p.start_offset), str(p.end_offset),
                      f"{p.end_offset - p.start_offset:,}", str(p.last_scn), f"{p.bytes:,}")
    if topic.config.view != pb.VIEW_ON:
        return table
    view = Table("partition", "view scn", "view lag", "view keys", "deleted", "view bytes",
                 title="compacted view (complete up to scn; lag in events behind the log)")
    for p in topic.partitions:
        view.add_row(str(p.partition), str(p.view_scn), f"{p.end_offset - p.view_offset:,}",
                     f"{p.view_keys:,}", f"{p.view_tombstones:,}", f"{p.view_bytes:,}")
    return Group(table, view)


def view_text(config: pb.TopicConfig) -> str:
    """The compacted view's settings, for a table title ("" when off)."""
    if config.view != pb.VIEW_ON:
        return "; no compacted view"
    kind = "compacted topic" if config.compacted else "compacted view"
    return f"; {kind}, tombstones kept {config.delete_retention_ms / 1000:g}s"


def topic_dict(topic: pb.TopicInfo) -> dict[str, object]:
    return {
        "topic": topic.topic,
        "partitions": topic.config.partitions,
        "retention_ms": topic.config.retention_ms,
        "retention_bytes": topic.config.retention_bytes,
        "created_ms": topic.created_ms,
        "partition_info": [
            {"partition": p.partition, "start_offset": p.start_offset, "end_offset": p.end_offset,
             "last_scn": p.last_scn, "bytes": p.bytes, **view_dict(topic.config, p)}
            for p in topic.partitions
        ],
        "view": topic.config.view == pb.VIEW_ON,
        "compacted": topic.config.compacted,
        "delete_retention_ms": topic.config.delete_retention_ms,
    }


def view_dict(config: pb.TopicConfig, p: pb.PartitionInfo) -> dict[str, int]:
    if config.view != pb.VIEW_ON:
        return {}
    return {"view_offset": p.view_offset, "view_scn": p.view_scn, "view_keys": p.view_keys,
            "view_tombstones": p.view_tombstones, "view_bytes": p.view_bytes}
