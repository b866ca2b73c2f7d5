"""One Bootstrap stream: snapshot, catch-up, then (follow) online.

Phases and their hand-overs (Databus's BOOTSTRAP_SNAPSHOT, BOOTSTRAP_CATCHUP,
ONLINE_CONSUMPTION):

    SNAPSHOT  the view at one point: every key's latest event below P
              (`snapshot.py`), P = snapshot_offset
    CATCHUP   the log from P up to T, the log's end when the catch-up starts
    ONLINE    the log from T on, as a follow read (only with follow)

Each phase opens with a marker; every message says its phase and where to
resume after it, so a client continues an interrupted bootstrap where it
stopped (by key in the snapshot, by offset later); a following stream
resumed ONLINE opens with one empty ONLINE message, so the client learns at
once that the broker answers again, before the next event. While the snapshot and
catch-up run, the stream pins P in the partition's view: retention keeps
the log the catch-up needs. Once caught up it calls `caught_up` (the
servicer gives back its slot of `bootstrap_streams_max`: from there on the
stream is a follow read like any other). Online, a filtered stream (a
filter, hash ranges or sources) also tells now and then how far it passed
records its filter dropped whole, as a filtered follow Read does
(`passed_scn`; broker/read_passed.py says when), so a Databus registration
that bootstrapped checkpoints past windows none of whose events it wants.
Runs on the event loop; reads go to worker threads.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from typing import TypeAlias

from broker.errors import BrokerError
from broker.log import codec as log_codec
from broker.metrics import BOOTSTRAP_SNAPSHOT_EVENTS, READ_EVENTS
from broker.partition import Partition
from broker.read_passed import Passed, PassedPositions
from broker.read_path import Chunk, EventSelector, ReadSpec
from broker.rpc import wire
from broker.tail_wait import now_ms, wait_at_tail
from broker.view.codec import ViewState
from broker.view.service import PartitionView
from broker.view.snapshot import Position, SnapshotCursor, SnapshotSpec
from sdk.bootstrap import BootstrapPosition
from sdk.core.columns import expand
from sdk.core.pb import keybus_pb2 as pb

MARKER_TAG = b"\x22"  # BootstrapResponse field 4, length-delimited
PHASE_TAG = b"\x28"  # field 5, varint
RESUME_TAG = b"\x32"  # field 6, length-delimited
PASSED_SCN_TAG = b"\x38"  # field 7, varint
PASSED_OFFSET_TAG = b"\x40"  # field 8, varint
INCARNATION_TAG = b"\x4a"  # field 9, length-delimited: the first message only (the servicer)


Phase: TypeAlias = pb.BootstrapPhase.ValueType


def response(records: list[bytes], next_offset: int, end_offset: int, phase: Phase,
             resume: pb.BootstrapResume, marker: pb.BootstrapMarker | None = None,
             passed: Passed | None = None) -> bytes:
    """BootstrapResponse bytes: a ReadResponse (fields 1..3) plus the rest
    (`passed`: an ONLINE message without records that tells a passed position)."""
    parts = [wire.read_response(records, next_offset, end_offset)]
    if marker is not None:
        data = marker.SerializeToString()
        parts += (MARKER_TAG, wire.varint(len(data)), data)
    if phase:
        parts += (PHASE_TAG, wire.varint(phase))
    data = resume.SerializeToString()
    parts += (RESUME_TAG, wire.varint(len(data)), data)
    if passed is not None:
        assert not records and passed.scn > 0 and next_offset > passed.offset
        parts += (PASSED_SCN_TAG, wire.varint(passed.scn),
                  PASSED_OFFSET_TAG, wire.varint(passed.offset))
    return b"".join(parts)


def source_selector(sources: frozenset[str], inner: EventSelector | None) -> EventSelector:
    """A selector that passes only events of `sources`, then `inner`."""
    def select(batch: pb.EventBatch) -> list[int]:
        column = batch.sources
        if len(column) <= 1:
            keep = list(range(batch.count)) if (column[0] if column else "") in sources else []
        else:
            keep = [i for i, s in enumerate(expand(column, batch.count, "")) if s in sources]
        if inner is None or not keep:
            return keep
        passing = set(inner(batch))
        return [i for i in keep if i in passing]
    return select


def position_of(resume: pb.BootstrapResume) -> Position:
    position = BootstrapPosition.from_proto(resume)
    return Position(position.source, position.key)


def resume_of(position: Position, snapshot_offset: int) -> pb.BootstrapResume:
    return BootstrapPosition("snapshot", snapshot_offset, position.source,
                             position.key).to_proto()


def check_loaded(partition: Partition, view: PartitionView, state: ViewState) -> None:
    """A view marked to be loaded from an upstream (broker/view/load.py) has no
    snapshot to give: refused with a status saying why and what to do.

    Raises:
        BrokerError: view_loading, or view_rebuilding when it is to be folded from
            this broker's log (both UNAVAILABLE).
    """
    if not state.load_from:
        return
    if view.fold_why:  # no upstream will load it: the maintainer folds it from the log
        failing = (f"; clearing the old view failed ({view.fold_failure}) and is retried"
                   if view.fold_failure else "")
        raise BrokerError("view_rebuilding", topic=partition.meta.name,
                          partition=partition.index, why=view.fold_why, failing=failing)
    source = view.source
    raise BrokerError("view_loading", topic=partition.meta.name, partition=partition.index,
                      start=state.load_from,
                      source=source.name if source is not None
                      else "an upstream (this broker copies the topic from none now)")


def check_complete(partition: Partition, view: PartitionView,
                   request: pb.BootstrapRequest) -> None:
    """A view that lacks keys (`PartitionView.gap`) is served only to a request that
    accepts it (allow_incomplete_view; its marker says keys_missing_below), never
    as if complete: a consumer would take the snapshot for the whole state.

    Raises:
        BrokerError: view_incomplete (UNAVAILABLE), naming the offset.
    """
    if view.gap and not request.allow_incomplete_view:
        raise BrokerError("view_incomplete", topic=partition.meta.name,
                          partition=partition.index, below=view.gap)


class BootstrapStream:
    """The phases of one Bootstrap call (built by the servicer, checked there)."""

    def __init__(self, partition: Partition, view: PartitionView, snapshot: SnapshotSpec,
                 read: ReadSpec, request: pb.BootstrapRequest,
                 open_cursor: Callable[[Position, int | None], SnapshotCursor],
                 caught_up: Callable[[], None] = lambda: None,
                 passing: Callable[[int], PassedPositions] | None = None) -> None:
        """`passing`: a filtered following stream's pacer of passed positions,
        made when it goes online (its argument: now in ms); None: it tells none."""
        self.partition = partition
        self.view = view
        self.snapshot = snapshot
        self.read = read
        self.request = request
        self.open_cursor = open_cursor
        self.caught_up = caught_up
        self.passing = passing
        self._pin: int | None = None
        self._truncations = len(partition.truncations)  # a cut past us ends the stream

    async def run(self) -> AsyncIterator[bytes]:
        resume = self.request.resume if self.request.HasField("resume") else None
        try:
            if resume is None or resume.phase == pb.SNAPSHOT:
                async for message in self._snapshot(resume):
                    yield message
                return
            self._check_offsets(resume)
            if resume.phase == pb.ONLINE and self.request.follow:
                # A stream resumed online may wait long for its next event; this empty
                # message (the same resume point) tells the client at once that the
                # broker answers, so it can say its broker is back (as a read's tail does).
                yield self._log_message([], resume.next_offset, pb.ONLINE,
                                        resume.target_offset, None)
            async for message in self._log(resume.next_offset, resume.target_offset, None,
                                           announce_online=resume.phase == pb.CATCHUP):
                yield message
        finally:
            if self._pin is not None:
                self.view.unpin(self._pin)

    # ------------------------------------------------------------ snapshot

    def _check_offsets(self, resume: pb.BootstrapResume) -> None:
        p = self.partition
        if resume.phase not in (pb.CATCHUP, pb.ONLINE):
            raise self._invalid("phase", resume.phase, "SNAPSHOT, CATCHUP or ONLINE")
        # Up to the durable log end: a restarted broker of a cluster holds readers
        # back (high watermark) until it knows what is acknowledged; the stream waits.
        if not resume.next_offset <= p.log_end:
            raise self._invalid("next_offset", resume.next_offset, f"0..{p.log_end}")
        if resume.phase == pb.CATCHUP and not (
                resume.next_offset <= resume.target_offset <= p.log_end):
            raise self._invalid("target_offset", resume.target_offset,
                                f"{resume.next_offset}..{p.log_end}")
        if resume.next_offset < p.start_offset:
            raise p.removed_error(resume.next_offset)
        if resume.phase == pb.CATCHUP:
            self._pin = self.view.pin(resume.next_offset)

    def _invalid(self, field: str, value: object, allowed: str) -> BrokerError:
        return BrokerError("bootstrap_resume_invalid", field=field, value=value,
                           topic=self.partition.meta.name, partition=self.partition.index,
                           allowed=f"allowed {allowed}")

    def _pin_snapshot(self, resume: pb.BootstrapResume | None) -> int | None:
        """Pin the log the catch-up will need; the snapshot offset asked for, if any."""
        p, view = self.partition, self.view
        if resume is None:
            self._pin = view.pin(view.state.offset_next)
            return None
        offset = resume.snapshot_offset
        if offset > view.state.offset_next:
            raise self._invalid("snapshot_offset", offset,
                                f"0..{view.state.offset_next} (what the view holds)")
        if offset < max(p.start_offset, p.removing_below):
            raise BrokerError("bootstrap_snapshot_gone", topic=p.meta.name, partition=p.index,
                              offset=offset, start=p.start_offset)
        self._pin = view.pin(offset)
        return offset

    async def _snapshot(self, resume: pb.BootstrapResume | None) -> AsyncIterator[bytes]:
        check_loaded(self.partition, self.view, self.view.state)
        check_complete(self.partition, self.view, self.request)
        asked = self._pin_snapshot(resume)
        position = position_of(resume) if resume is not None else Position()
        cursor = await asyncio.to_thread(self._open, position, asked)
        try:
            check_loaded(self.partition, self.view, cursor.state)  # marked since the check
            check_complete(self.partition, self.view, self.request)
            offset = cursor.snapshot_offset
            assert self._pin is not None
            self.view.move_pin(self._pin, offset)
            marker = pb.BootstrapMarker(
                phase=pb.SNAPSHOT, snapshot_offset=offset,
                snapshot_scn=cursor.state.scn if asked is None else await self._scn_before(offset),
                consistent_offset=offset if resume is None else cursor.state.offset_next,
                keys_missing_below=self.view.gap)
            async for message in self._snapshot_chunks(cursor, marker):
                yield message
        finally:
            cursor.close()
        async for message in self._log(offset, self.partition.end_offset, marker):
            yield message

    def _open(self, position: Position, asked: int | None) -> SnapshotCursor:
        try:
            return self.open_cursor(position, asked)
        except ValueError as e:
            raise self._invalid("source", position.source, str(e)) from None

    async def _snapshot_chunks(self, cursor: SnapshotCursor,
                               marker: pb.BootstrapMarker) -> AsyncIterator[bytes]:
        first: pb.BootstrapMarker | None = marker
        topic = self.partition.meta.name
        while True:
            chunk = await asyncio.to_thread(cursor.next_chunk)
            BOOTSTRAP_SNAPSHOT_EVENTS.labels(topic).inc(chunk.events)
            records = [r.SerializeToString() for r in chunk.records]
            if records or first is not None or chunk.done:
                yield response(records, 0, self.partition.end_offset, pb.SNAPSHOT,
                               resume_of(chunk.position, cursor.snapshot_offset), first)
                first = None
            if chunk.done:
                return

    async def _scn_before(self, offset: int) -> int:
        """The SCN of the event just below `offset` (0 if it is gone)."""
        if offset == 0:
            return 0
        p = self.partition

        def find() -> int:
            for base, value in p.store.records_from(p.meta.topic_id, p.index, offset - 1):
                header = log_codec.decode_header(value)
                if base <= offset - 1 < base + header.count:
                    return header.scn_first if header.window else header.scn_first + (
                        offset - 1 - base)
                return 0
            return 0
        return await asyncio.to_thread(find)

    # ------------------------------------------------------------ catch-up and online

    async def _log(self, offset: int, target: int, snapshot: pb.BootstrapMarker | None,
                   announce_online: bool = True) -> AsyncIterator[bytes]:
        """The catch-up from `offset` up to `target`, then online (with follow).

        Args:
            snapshot: the SNAPSHOT marker when a snapshot was just sent (a
                CATCHUP marker follows); None when resuming in the log.
            announce_online: send the ONLINE marker on reaching `target`.
        """
        stop = self.read.stop_offset
        if stop is not None:
            target = min(target, stop)
        if snapshot is not None:
            yield self._log_message([], offset, pb.CATCHUP, target, pb.BootstrapMarker(
                phase=pb.CATCHUP, snapshot_offset=snapshot.snapshot_offset,
                snapshot_scn=snapshot.snapshot_scn, target_offset=target,
                consistent_offset=max(snapshot.consistent_offset, offset)))
        while offset < target:
            if offset >= self.partition.end_offset:  # a resume past the high watermark
                await self.partition.wait_for_data(offset)
            offset, message, _ = await self._read(offset, target, pb.CATCHUP, target)
            if self._pin is not None:
                self.view.move_pin(self._pin, offset)
            if message is not None:
                yield message
        if self._pin is not None:
            self.view.unpin(self._pin)
            self._pin = None
        self.caught_up()  # the snapshot and catch-up are over: what the limit bounds
        if not self.request.follow or (stop is not None and offset >= stop):
            return
        if announce_online:
            marker = pb.BootstrapMarker(phase=pb.ONLINE, target_offset=target)
            if snapshot is not None:
                marker.snapshot_offset = snapshot.snapshot_offset
                marker.snapshot_scn = snapshot.snapshot_scn
            yield self._log_message([], offset, pb.ONLINE, target, marker)
        async for message in self._online(offset, target):
            yield message

    async def _online(self, offset: int, target: int) -> AsyncIterator[bytes]:
        """The log from `offset` on, as a follow read; a filtered stream also
        tells the positions its pacer says (as the Read servicer does)."""
        stop = self.read.stop_offset
        p = self.partition
        passing = self.passing(now_ms()) if self.passing is not None else None
        while stop is None or offset < stop:
            if offset >= p.end_offset:
                passed = await wait_at_tail(functools.partial(p.wait_for_data, offset), passing)
                if passed is not None:
                    yield self._log_message([], offset, pb.ONLINE, target, None, passed)
                continue
            offset, message, chunk = await self._read(offset, stop, pb.ONLINE, target)
            if message is not None:
                yield message
            if passing is not None:
                passing.process_chunk(chunk.passed, chunk.scanned_events, message is not None,
                                      now_ms())
                passed = passing.due(now_ms())
                if passed is not None:
                    yield self._log_message([], offset, pb.ONLINE, target, None, passed)

    async def _read(self, offset: int, stop: int | None, phase: Phase,
                    target: int) -> tuple[int, bytes | None, Chunk]:
        """One chunk of the log from `offset`: the next offset, its message, the chunk."""
        p, spec = self.partition, self.read
        p.check_truncation(self._truncations, offset)
        bounded = ReadSpec(spec.topic_id, spec.partition, stop, spec.events_max,
                           spec.bytes_max, spec.slot_mask, spec.selector)
        chunk = await p.read(bounded, offset)
        if p.removing_below > offset:  # retention removed what this read needed
            raise p.removed_error(offset)
        next_offset = max(offset, chunk.next_offset)
        if not chunk.records:
            return next_offset, None, chunk
        READ_EVENTS.labels(p.meta.name).inc(chunk.events)
        message = self._log_message(chunk.records, next_offset, phase, target, None)
        return next_offset, message, chunk

    def _log_message(self, records: list[bytes], next_offset: int, phase: Phase, target: int,
                     marker: pb.BootstrapMarker | None, passed: Passed | None = None) -> bytes:
        resume = pb.BootstrapResume(phase=phase, next_offset=next_offset, target_offset=target)
        return response(records, next_offset, self.partition.end_offset, phase, resume, marker,
                        passed)
