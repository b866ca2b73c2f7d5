"""Where a read or subscription starts in a partition, and why it cannot, in words.

A StartPosition names the latest or earliest offset, an SCN or an offset;
an offset must be stored (retention may have removed it) and at most the
log end (past the high watermark a reader waits). The out-of-range errors
say what the partition holds, counting the cut retention is making
(`Partition.removing_below`), so a reader told where to go finds it there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.errors import BrokerError
from sdk.core.pb import keybus_pb2 as pb

if TYPE_CHECKING:
    from broker.partition import Partition


def resolve_start(p: Partition, start: pb.StartPosition, unset_is_latest: bool = False) -> int:
    """The offset a StartPosition names in `p`, or why it cannot be used.

    Raises:
        BrokerError: no position set (unless unset_is_latest: a new
            subscription starts at the end, as in Pulsar), or an offset
            outside what is stored.
    """
    which = start.WhichOneof("position")
    if which is None and not unset_is_latest:
        raise BrokerError("start_invalid")
    if which is None or which == "latest":
        return p.end_offset
    if which == "earliest":
        return stored_start(p)
    if which == "scn":
        return offset_for_scn(p, start.scn)
    # Up to the log end: past the high watermark a reader waits for it.
    if start.offset < stored_start(p):
        raise removed_error(p, start.offset)
    if start.offset > p.log_end:
        raise BrokerError("offset_past_end", offset=start.offset, topic=p.meta.name,
                          partition=p.index, start=p.start_offset, end=p.log_end,
                          held=held_text(p))
    return start.offset


def stored_start(p: Partition) -> int:
    """The first offset a reader may start at: the start offset, or the cut retention
    is making (set before its delete; the start offset moves after it). An earliest
    read resolved to the old start while the delete runs would meet the gap and be
    told its offsets were removed, though it asked for whatever is first."""
    return max(p.start_offset, p.removing_below)


def removed_error(p: Partition, offset: int, found: int | None = None) -> BrokerError:
    """offset_before_start (OUT_OF_RANGE): a read's start offset, or (`found`, the
    next stored offset the read came to) offsets offset..found-1 it reached, were
    removed by retention. The stored range counts the cut retention is making."""
    where = f"{p.meta.name}/{p.index}"
    what = (f"start offset {offset} of {where} was" if found is None else
            f"offsets {offset}..{found - 1} of {where}, which this read had reached, were")
    start = stored_start(p)
    return BrokerError("offset_before_start", what=what, start=start, end=p.log_end,
                       held=held_text(p, start))


def held_text(p: Partition, start: int | None = None) -> str:
    """What `p` holds (from `start`, default its start offset), in words, for an
    out-of-range start."""
    start = p.start_offset if start is None else start
    if start >= p.end_offset:
        return f"the partition is empty and its next event gets offset {p.end_offset}"
    return f"the partition holds offsets {start}..{p.end_offset - 1}"


def offset_for_scn(p: Partition, scn: int) -> int:
    """The first offset at or after `scn` that is stored (the end: none yet)."""
    found = p.store.offset_for_scn(p.meta.topic_id, p.index, scn)
    return p.end_offset if found is None else max(found, stored_start(p))


__all__ = ["held_text", "offset_for_scn", "removed_error", "resolve_start", "stored_start"]
