"""CLI rendering at a terminal's width (keybus/cli/render*.py).

Goal: in 80 columns (a pipe counts as 80) tables fit, a name is never cut
('…' never appears), the range bar is whole on a line of its own and scaled
to the width, the state column says something, and --wide lays out in full.
Method: render pure functions into a rich Console of a fixed width and read
the text back.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from keybus.cli import render, render_subscriptions
from keybus.cli.render_processors import checkpoint_rows, checkpoints_table
from sdk.core.hashing import SLOT_COUNT
from sdk.core.model import HashRange
from sdk.core.pb import keybus_pb2 as pb
from sdk.stores.records import Checkpoint

LONG = "billing-for-the-european-warehouse-team-v2"


def text_of(renderables: object, width: int = 80) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    for r in renderables if isinstance(renderables, list) else [renderables]:
        console.print(r)
    return console.export_text()


@given(st.integers(1, 400), st.integers(0, SLOT_COUNT - 1), st.integers(0, SLOT_COUNT - 1))
def test_range_bar_any_width_whole_and_true(width: int, a: int, b: int) -> None:
    first, last = min(a, b), max(a, b)
    bar = render.range_bar([HashRange(first, last)], width)
    assert len(bar) == width
    for cell, char in enumerate(bar):
        lo = -(-cell * SLOT_COUNT // width)
        hi = -(-(cell + 1) * SLOT_COUNT // width) - 1
        owned = max(0, min(hi, last) - max(lo, first) + 1)
        assert char == ("█" if owned == hi - lo + 1 else "▌" if owned else "·")


def test_bars_scale_to_the_width_and_long_names_take_their_own_line() -> None:
    rows = [("alice", [HashRange(0, 32767)]), ("bob", [HashRange(32768, 65535)])]
    for width in (40, 80, 132):
        heading, *lines = [t.plain for t in render.bars(rows, width)]
        assert heading.startswith("hash ranges") and len(heading) <= 80
        assert all(len(line) <= width for line in lines), lines
        assert lines[0] == "alice  " + "█" * ((width - 7) // 2) + lines[0][7 + (width - 7) // 2:]
        assert len(lines[0]) == width  # the whole line: the bar takes what the name leaves
    lines = [t.plain for t in render.bars([(LONG * 2, [HashRange(0, 65535)])], 80)]
    assert lines[1] == LONG * 2 and lines[2] == "  " + "█" * 78


def _consumer(name: str, ranges: list[tuple[int, int]], active: bool = False) -> pb.ConsumerInfo:
    return pb.ConsumerInfo(name=name, ranges=[pb.HashRange(slot_first=a, slot_last=b)
                                              for a, b in ranges], unacked=12, permits=988,
                           dispatch_rate=1234.5, active=active)


def _subscription(kind: int, consumers: list[pb.ConsumerInfo], name: str = LONG
                  ) -> pb.SubscriptionInfo:
    partition = pb.SubscriptionPartitionInfo(partition=0, mark_delete=10, end_offset=1_000_010,
                                             backlog=1_000_000, consumers=consumers)
    return pb.SubscriptionInfo(topic="orders", subscription=name, type=kind,
                               key_shared_mode=pb.AUTO_SPLIT, partitions=[partition])


def test_subscriptions_list_fits_80_columns_without_cutting_names() -> None:
    infos = [_subscription(pb.KEY_SHARED, [_consumer("a", [(0, 65535)])]),
             _subscription(pb.SHARED, [], name="s")]
    for width in (80, 60):
        out = text_of(render_subscriptions.subscriptions_table("orders", infos, width), width)
        assert LONG in out and "…" not in out
        assert max(len(line) for line in out.splitlines()) <= width, out
    short = [_subscription(pb.KEY_SHARED, [], name="billing")]
    table = text_of(render_subscriptions.subscriptions_table("orders", short, 80))
    assert "key_shared/auto_split" in table and "1,000,000" in table
    assert "subscription" in table.splitlines()[1]  # a table, not blocks


def test_describe_key_shared_at_80_columns_has_whole_bars_and_names() -> None:
    info = _subscription(pb.KEY_SHARED, [_consumer("alice", [(0, 21844)]),
                                         _consumer(LONG, [(21845, 65535)])])
    out = text_of(render_subscriptions.describe(info, 80))
    assert "…" not in out and LONG in out and "alice" in out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    bar_lines = [line for line in out.splitlines()
                 if ("█" in line or "··" in line) and not line.startswith("hash ranges")]
    cells = {len(line.split()[-1]) for line in bar_lines}
    assert len(cells) == 1 and cells.pop() == 80 - len(LONG) - 2  # whole, same scale
    assert "state" not in out  # Key_Shared has no active/standby


def test_describe_failover_state_says_active_or_standby() -> None:
    info = _subscription(pb.FAILOVER, [_consumer("f1", [], active=True), _consumer("f2", [])])
    out = text_of(render_subscriptions.describe(info, 80))
    rows = {line.split()[0]: line.split()[-1] for line in out.splitlines()
            if line.startswith(("f1", "f2"))}
    assert rows == {"f1": "active", "f2": "standby"}


def test_many_ranges_are_counted_unless_wide() -> None:
    ranges = [(i * 600, i * 600 + 99) for i in range(50)]
    info = _subscription(pb.KEY_SHARED, [_consumer("c1", ranges)], name="cons")
    narrow = text_of(render_subscriptions.describe(info, 80))
    assert "50 ranges, 5,000 slots" in narrow
    wide = text_of(render_subscriptions.describe(info, 100_000, wide=True), 100_000)
    assert "0-99,600-699," in wide and "29400-29499" in wide
    assert "█" * 1 in wide and any(len(line.split()[-1]) == render.BAR_WIDTH_WIDE
                                   for line in wide.splitlines() if line.startswith("c1  "))


def test_topics_table_names_whole_in_a_narrow_terminal() -> None:
    topic = pb.TopicInfo(topic="orders-" + LONG, config=pb.TopicConfig(partitions=3),
                         created_ms=1_700_000_000_000)
    out = text_of(render.topics_table([topic], 60), 60)
    assert "orders-" + LONG in out and "…" not in out


@pytest.mark.parametrize(("ranges", "wide", "text"), [
    ([], False, "-"),
    ([HashRange(0, 99)], False, "0-99"),
    ([HashRange(0, 9), HashRange(20, 29), HashRange(40, 49), HashRange(60, 69)], False,
     "4 ranges, 40 slots"),
    ([HashRange(0, 9), HashRange(20, 29), HashRange(40, 49), HashRange(60, 69)], True,
     "0-9,20-29,40-49,60-69"),
])
def test_format_ranges(ranges: list[HashRange], wide: bool, text: str) -> None:
    assert render.format_ranges(ranges, wide) == text


def test_checkpoint_lag_counts_only_what_is_still_stored() -> None:
    """A checkpoint at 9 of a partition retention trimmed to 100..120: 21 events are
    left to process, not 110, and the row says the checkpoint is behind retention."""
    info = pb.TopicInfo(topic="t", partitions=[
        pb.PartitionInfo(partition=0, start_offset=100, end_offset=121),
        pb.PartitionInfo(partition=1, start_offset=0, end_offset=50)])
    checkpoints = [Checkpoint("", "t", "g", 0, 9, 10, 0), Checkpoint("", "t", "g", 1, 9, 10, 0)]
    rows = checkpoint_rows(info, checkpoints)
    assert [(r["lag"], r["behind_retention"]) for r in rows] == [(21, True), (40, False)]
    console = Console(width=80, record=True)
    console.print(checkpoints_table("checkpoints", rows, 80))
    assert "21 (behind retention)" in console.export_text()
