"""The note `keybus databus tail --from-scn N` prints when N is below what the log holds.

A read from {"scn": n} below a partition's start begins at its first stored
event without an error (the broker resolves the SCN to the first stored
offset at or after it). When retention removed events of that partition and
its first stored event has an SCN past N, events from N up to it may be gone:
the tail would start later than asked, in silence. One line on stderr says
so, as the CLI's other notes, naming each such partition's first stored SCN
and offset. `gone_note` is the pure rule; `first_scns` the I/O (the topic's
description, then one event of each partition retention cut).
"""

from __future__ import annotations

from dataclasses import dataclass

from keybus.cli.common import Connection, note
from sdk import errors
from sdk.admin import Admin
from sdk.reader import Reader


@dataclass(frozen=True, slots=True)
class PartitionStart:
    """Where a partition's stored log starts.

    Attributes:
        partition: its index.
        start_offset: the first stored offset (> 0: retention removed events).
        first_scn: the SCN of the event there (None: nothing stored now).
        last_scn: the partition's last SCN (of a removed event when it is empty).
    """

    partition: int
    start_offset: int
    first_scn: int | None
    last_scn: int


def gone_note(topic: str, from_scn: int, starts: list[PartitionStart]) -> str | None:
    """The one line saying events from `from_scn` on were removed, or None.

    A partition counts when retention removed events (start_offset > 0) and
    what it stores begins past from_scn: its first SCN is greater, or it is
    empty and its last (removed) SCN is at least from_scn."""
    parts = []
    for s in starts:
        if s.start_offset == 0:
            continue
        if s.first_scn is not None and s.first_scn > from_scn:
            parts.append(f"partition {s.partition} starts at SCN {s.first_scn} "
                         f"(offset {s.start_offset})")
        elif s.first_scn is None and s.last_scn >= from_scn:
            parts.append(f"partition {s.partition} holds none (up to SCN {s.last_scn} removed)")
    if not parts:
        return None
    return (f"--from-scn {from_scn} is before the start of {topic}: events before the start "
            f"are gone (removed by retention; {'; '.join(parts)}); starting at the first "
            "event stored")


async def note_gone(conn: Connection, topic: str, from_scn: int) -> None:
    """Print `gone_note`'s line, if any, on stderr. A failure to look prints
    nothing: the tail that follows reports it (a missing topic, no broker)."""
    try:
        async with await conn.topic_admin(topic) as admin:
            starts = await first_scns(admin, topic)
    except errors.KeybusError:
        return
    line = gone_note(topic, from_scn, starts)
    if line is not None:
        note(line)


async def first_scns(admin: Admin, topic: str) -> list[PartitionStart]:
    """Each partition's start; the first SCN is read only where retention cut
    (a partition cut again meanwhile is left out: nothing certain to say)."""
    info = await admin.describe_topic(topic)
    starts = []
    for p in info.partitions:
        first = None
        if 0 < p.start_offset < p.end_offset:
            try:
                first = await _scn_at(admin.broker, topic, p.partition, p.start_offset)
            except errors.OffsetOutOfRange:
                continue
        starts.append(PartitionStart(p.partition, p.start_offset, first, p.last_scn))
    return starts


async def _scn_at(broker: str, topic: str, partition: int, offset: int) -> int | None:
    """The SCN of the event at `offset` (None: the read found none)."""
    async with Reader(broker, topic, partition, start=offset, follow=False,
                      stop_offset=offset + 1, events_max=1) as reader:
        async for batch in reader:
            return batch.scns()[0]
    return None
