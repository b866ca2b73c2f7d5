"""Pure rendering for the CLI: tables that fit the terminal, and the 0..65535 range bar.

No I/O here: functions return strings or rich renderables for a given width;
the commands print them. Two rules a user sees:

- A name (topic, subscription, consumer) is never cut. A table that does not
  fit the width becomes one block per row (the name on its own line), and
  `--wide` lays it out at its natural width instead.
- The range bar gets a line of its own, scaled to the width: one cell per
  65536/width slots, so it stays whole in 80 columns.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from sdk.core.hashing import SLOT_COUNT
from sdk.core.model import HashRange
from sdk.core.pb import keybus_pb2 as pb

BAR_WIDTH_MIN = 16
BAR_WIDTH_WIDE = 128


def range_bar(ranges: Iterable[HashRange], width: int) -> str:
    """Draw which slots a consumer owns in `width` cells over 0..65535.

    Cell i covers slots [i*65536/width, (i+1)*65536/width). A cell is '█' when
    every slot in it is owned, '▌' when some are, '·' when none.
    """
    assert width > 0
    owned = [0] * width
    for r in ranges:
        first_cell = r.slot_first * width // SLOT_COUNT
        last_cell = r.slot_last * width // SLOT_COUNT
        for cell in range(first_cell, last_cell + 1):
            lo = max(r.slot_first, _cell_start(cell, width))
            hi = min(r.slot_last, _cell_start(cell + 1, width) - 1)
            owned[cell] += hi - lo + 1
    return "".join("█" if n == _cell_start(i + 1, width) - _cell_start(i, width)
                   else "▌" if n else "·" for i, n in enumerate(owned))


def _cell_start(cell: int, width: int) -> int:
    return -(-cell * SLOT_COUNT // width)  # ceil: the first slot whose cell is `cell`


def bar_cells(width: int, name_width: int, wide: bool = False) -> tuple[int, bool]:
    """(cells of a bar, whether it goes on a line of its own under its name).

    The bar takes the rest of the line after the name (at least BAR_WIDTH_MIN
    cells); with wide, BAR_WIDTH_WIDE cells whatever the width. A name too long
    to leave that room puts its bar on the next line, as wide as the terminal.
    """
    if wide:
        return BAR_WIDTH_WIDE, False
    cells = max(width - name_width - 2, BAR_WIDTH_MIN)
    if name_width + 2 + cells > width:
        return max(width - 2, BAR_WIDTH_MIN), True
    return cells, False


def bars(rows: Sequence[tuple[str, Sequence[HashRange]]], width: int,
         wide: bool = False) -> list[Text]:
    """A heading and one bar line per (name, ranges), names padded to one column."""
    if not rows:
        return []
    name_width = max(len(name) for name, _ in rows)
    cells, own_line = bar_cells(width, name_width, wide)
    lines = [Text(f"hash ranges over slots 0─65535; a cell ≈ {SLOT_COUNT / cells:,.0f} slots: "
                  "█ all, ▌ some, · none", style="italic")]
    for name, ranges in rows:
        if own_line:
            lines.append(Text(name, style="bold"))
            lines.append(Text("  " + range_bar(ranges, cells)))
        else:
            lines.append(Text.assemble((name.ljust(name_width), "bold"), "  ",
                                       range_bar(ranges, cells)))
    return lines


def format_ranges(ranges: Sequence[HashRange], wide: bool = True, shown_max: int = 3) -> str:
    """Ranges as text; unless wide, more than `shown_max` become a count."""
    if not ranges:
        return "-"
    if wide or len(ranges) <= shown_max:
        return ",".join(str(r) for r in ranges)
    slots = sum(r.slot_last - r.slot_first + 1 for r in ranges)
    return f"{len(ranges)} ranges, {slots:,} slots"


def format_time_ms(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def fit_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], width: int,
              wide: bool = False, numeric_from: int = 1) -> RenderableType:
    """A table if it fits `width` (or `wide`), else one block per row.

    Columns are two spaces apart, or one when that makes the table fit; past
    that, each row becomes a block: its name on a line, the other columns as
    `header value` pairs under it.

    Args:
        headers, rows: the first column is the name (never cut).
        numeric_from: columns from this index on are right-aligned.
    """
    for padding in (1, 0):
        table = _table(title, headers, rows, padding, numeric_from)
        if wide or _natural_width(table) <= width:
            return table
    blocks: list[RenderableType] = [Text(title, style="italic")] if title else []
    for row in rows:
        blocks.append(Text(row[0], style="bold"))
        pairs = [f"{h} {v}" for h, v in zip(headers[1:], row[1:], strict=True)]
        blocks.extend(Text("    " + line) for line in _packed(pairs, width - 4))
    return Group(*blocks)


def _packed(pairs: Sequence[str], width: int) -> list[str]:
    """`header value` pairs two spaces apart, a line break only between pairs."""
    lines: list[str] = []
    line = ""
    for pair in pairs:
        if line and len(line) + 2 + len(pair) > width:
            lines.append(line)
            line = pair
        else:
            line = f"{line}  {pair}" if line else pair
    return [*lines, line] if line else lines


def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], padding: int,
           numeric_from: int) -> Table:
    table = Table(*headers, title=title or None, box=box.SIMPLE_HEAD, title_justify="left",
                  pad_edge=False, show_edge=False, padding=(0, padding))
    for i, column in enumerate(table.columns):
        column.no_wrap = True
        column.overflow = "fold"
        if i >= numeric_from:
            column.justify = "right"
    for row in rows:
        table.add_row(*row)
    return table


def _natural_width(table: Table) -> int:
    console = Console(width=10_000)
    return Measurement.get(console, console.options, table).maximum


def topics_table(topics: Sequence[pb.TopicInfo], width: int, wide: bool = False
                 ) -> RenderableType:
    rows = []
    for t in topics:
        events = sum(p.end_offset - p.start_offset for p in t.partitions)
        size = sum(p.bytes for p in t.partitions)
        rows.append((t.topic, str(t.config.partitions), f"{events:,}", f"{size:,}",
                     retention_text(t.config), format_time_ms(t.created_ms)))
    return fit_table("", ("topic", "partitions", "events", "bytes", "retention",
                          "created (UTC)"), rows, width, wide)


def retention_text(config: pb.TopicConfig) -> str:
    parts = []
    if config.retention_ms:
        parts.append(f"{config.retention_ms / 1000:g}s")
    if config.retention_bytes:
        parts.append(f"{config.retention_bytes:,} B/partition")
    return ", ".join(parts) or "forever"


def partitions_table(topic: pb.TopicInfo, width: int, wide: bool = False) -> RenderableType:
    """The partitions, and below them the compacted view's state when there is one."""
    rows = [(str(p.partition), str(p.start_offset), str(p.end_offset),
             f"{p.end_offset - p.start_offset:,}", str(p.last_scn), f"{p.bytes:,}")
            for p in topic.partitions]
    title = f"topic {topic.topic} ({incarnation_text(topic)}retention: " \
            f"{retention_text(topic.config)}{view_text(topic.config)})"
    table = fit_table(title, ("partition", "start offset", "end offset", "events", "last scn",
                              "bytes"), rows, width, wide)
    if topic.config.view != pb.VIEW_ON:
        return table
    view_rows = [(str(p.partition), str(p.view_scn), f"{p.end_offset - p.view_offset:,}",
                  f"{p.view_keys:,}", f"{p.view_tombstones:,}", f"{p.view_bytes:,}")
                 for p in topic.partitions]
    view = fit_table("compacted view (complete up to scn; lag in events behind the log)",
                     ("partition", "view scn", "view lag", "view keys", "deleted",
                      "view bytes"), view_rows, width, wide)
    return Group(table, Text(""), view)


def incarnation_text(topic: pb.TopicInfo) -> str:
    """Which topic of this name it is (new when it is deleted and created again;
    Kafka's topic ID), for a table title ("" from a broker that does not say)."""
    return f"incarnation {topic.incarnation}; " if topic.incarnation else ""


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
        "incarnation": topic.incarnation,
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
