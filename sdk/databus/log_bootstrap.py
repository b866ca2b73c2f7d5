"""A partition's bootstrap as window pieces: snapshot, catch-up, then the live log.

`LogWindows` switches a partition here when its checkpoint is older than
what the log still holds (the Reader's OUT_OF_RANGE, or a checkpoint below
the partition's start offset), when the registration allows bootstrap, or
when its checkpoint says a bootstrap was under way. One following Reader
with start="bootstrap" (sdk/bootstrap.py) brings:

* the snapshot: each record (rows of one source, in key order, deleted keys
  as DELETE events, with their original offset and SCN) is one bootstrap
  sequence, at the snapshot's SCN, whose checkpoint records the snapshot's
  position by key;
* the catch-up: the log's windows as bootstrap sequences, whose checkpoints
  record the catch-up's position by offset;
* after the ONLINE marker, ordinary windows (ordinary checkpoints), and
  where the broker says the stream passed records the registration's filter
  dropped whole, that position (runner rule 9, as `LogWindows` hands it on),
  so the checkpoint moves on although no window matches.

on_start_bootstrap comes first (also when a saved bootstrap is resumed),
on_end_bootstrap at the ONLINE marker. Retention that outruns the read later
starts a new snapshot (`read_bootstrap`), announced again once the partition
was online. A broker whose bootstrap slots are all taken
(`bootstrap_streams_max`: RESOURCE_EXHAUSTED, "retry later") is waited out by
the Reader itself (sdk/slot_wait.py), said here at WARNING with the
registration's name, not as a lost broker. Databus's checkpoint modes are the
three phases of `BootstrapPosition`. A bootstrap is of one incarnation of the
topic: that of the log read that fell behind, else the one the broker names
first, kept by the Reader across reopens and carried into a new snapshot, so a
topic deleted and created again meanwhile ends the partition's read with
`TopicRecreated` (on_error) instead of feeding the new topic into state built
from the old one.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sdk import errors
from sdk.bootstrap import CATCHUP, SNAPSHOT, BootstrapPosition
from sdk.core.columns import batch_slots
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus.event import EventColumns
from sdk.databus.inbox import MarkerItem, PassedItem, PieceItem
from sdk.databus.pieces import record_pieces
from sdk.databus.window import WindowPiece
from sdk.read_batch import PassedPosition
from sdk.reader import ReadBatch, Reader

if TYPE_CHECKING:
    from sdk.databus.log_windows import LogWindows

_log = logging.getLogger("keybus.databus")


@dataclass(frozen=True, slots=True)
class BootstrapStart:
    """Start a partition with a bootstrap: a new one (position None) or a saved one."""

    position: BootstrapPosition | None = None
    snapshot_scn: int = 0  # the saved snapshot's SCN (a new one's comes in its marker)
    # The topic's incarnation the partition was read in (a log read that fell behind
    # retention names it): the bootstrap must be of the same topic (None: not known).
    incarnation: str | None = None


def snapshot_piece(record: pb.Record, need_slots: bool, snapshot_scn: int,
                   position: BootstrapPosition) -> WindowPiece:
    """Snapshot rows (one record, one source) as one bootstrap sequence.

    Its checkpoint offset is the one before the snapshot's point (the last
    event the snapshot covers); its position says which key comes next.
    """
    batch = record.batch
    count = batch.count
    return WindowPiece(record.partition, snapshot_scn, max(position.snapshot_offset - 1, 0),
                       range(count), batch.sources, batch.schemas,
                       batch_slots(batch) if need_slots else (), EventColumns(record),
                       sum(map(len, batch.values)), bootstrap=True, position=position)


def catchup_pieces(record: pb.Record, need_slots: bool,
                   after: BootstrapPosition) -> list[WindowPiece]:
    """A catch-up record's windows as bootstrap sequences; each one's position
    resumes the catch-up after it."""
    return [dataclasses.replace(piece, bootstrap=True, position=BootstrapPosition(
        CATCHUP, after.snapshot_offset, None, None, piece.offset_last + 1, after.target_offset))
        for piece in record_pieces(record, need_slots)]


def pieces_of(batch: ReadBatch, need_slots: bool, snapshot_scn: int,
              after: BootstrapPosition | None) -> list[WindowPiece]:
    """The pieces of one batch of a bootstrap read, by its phase."""
    if batch.phase == SNAPSHOT:
        assert after is not None
        return [snapshot_piece(batch.record, need_slots, snapshot_scn, after)]
    if batch.phase == CATCHUP:
        assert after is not None
        return catchup_pieces(batch.record, need_slots, after)
    return record_pieces(batch.record, need_slots)


@dataclass(slots=True)
class _Progress:
    """What one bootstrap read put into the inbox: whether it may be started over."""

    pieces: int = 0
    online: bool = False  # the ONLINE marker passed: on_end_bootstrap was put
    # The topic's incarnation the read was of (given, or named by the broker): a new
    # snapshot after this read is asked of the same one, so the state the consumer
    # built is never continued from another topic of the same name.
    incarnation: str | None = None


async def read_bootstrap(source: LogWindows, partition: int, start: BootstrapStart) -> None:
    """Put a partition's bootstrap, then its live windows, into the source's inbox.

    Retention outrunning the read (OUT_OF_RANGE) starts a new snapshot: a saved
    bootstrap whose log is gone, a catch-up whose pin a restarted broker lost,
    and a partition that went online and then fell behind again (announced
    with on_start_bootstrap once more, as Databus bootstraps a client that fell
    off its relay). Only a new bootstrap that delivered nothing gives up.

    Raises:
        KeybusError: the read failed for good (the caller reports it).
    """
    put = source.inbox.put
    await put(MarkerItem("on_start_bootstrap"))
    position, snapshot_scn = start.position, start.snapshot_scn
    incarnation = start.incarnation
    while True:
        progress = _Progress(incarnation=incarnation)
        try:
            await _follow(source, partition, position, snapshot_scn, progress)
            return
        except errors.OffsetOutOfRange as e:
            if position is None and not progress.pieces and not progress.online:
                raise
            if progress.online:
                _log.warning("%s: partition %d fell behind retention after its bootstrap "
                             "(%s); bootstrapping again", source.name, partition, e.message)
                await put(MarkerItem("on_start_bootstrap"))
            else:
                _log.warning("%s: the bootstrap of partition %d cannot go on (%s); "
                             "starting a new snapshot", source.name, partition, e.message)
            position, snapshot_scn, incarnation = None, 0, progress.incarnation


def _say_slot_wait(name: str, waiting: bool, message: str) -> None:
    """The Reader's report of a wait for a bootstrap slot, with the registration's
    name: a WARNING when it begins, INFO when it got one (not on_error: the broker
    is there, and the wait ends by itself)."""
    if waiting:
        _log.warning("%s: %s", name, message)
    else:
        _log.info("%s: %s", name, message)


async def _follow(source: LogWindows, partition: int, position: BootstrapPosition | None,
                  snapshot_scn: int, progress: _Progress) -> None:
    reader = Reader(source.broker, source.topic, partition, start=position or "bootstrap",
                    key_filter=source.key_filter, follow=True, include_tombstones=True,
                    sources=source.sources, bytes_max=source.config.reader_bytes_max,
                    channel=source.channel, on_connection_change=source.connection_changed,
                    on_slot_wait=functools.partial(_say_slot_wait, source.name),
                    incarnation=progress.incarnation)
    put = source.inbox.put
    try:
        async for batch in reader.items():
            if isinstance(batch, PassedPosition):  # online: windows with nothing for us
                if progress.online:
                    await put(PassedItem(partition, batch.offset, batch.scn))
                continue
            marker = batch.marker
            if marker is not None:
                if marker.phase == SNAPSHOT:
                    snapshot_scn = marker.snapshot_scn
                elif marker.phase == "online":
                    await put(MarkerItem("on_end_bootstrap"))
                    progress.online = True
                continue
            for piece in pieces_of(batch, source.need_slots, snapshot_scn, reader.position):
                await put(PieceItem(piece, True))
                progress.pieces += 1
    finally:
        progress.incarnation = reader.incarnation
        await reader.close()
