"""Windows read from the log: one following Reader per partition, from the checkpoint.

The source behind `DatabusClient.register`. Each partition starts at the
first window after its checkpoint (`{"scn": checkpoint.scn + 1}`), else at
the registration's start position, and is read with the registration's
server-side filter. A read returns whole stored records, so every window
arrives whole: the runner never sees a window cut by the transport. Where
the filter dropped whole records, the broker says now and then how far the
read passed them (`Reader.items()`); that position goes to the runner, which
checkpoints it between windows, so the checkpoint moves on although no event
comes (Databus's end-of-period events). Readers
reconnect on their own (following reads retry forever) and tell the link,
which says an outage once for all of them (connection.py); its
`ConnectionWatch` turns a long outage into a notice.

Bootstrap (log_bootstrap.py): a partition whose checkpoint is older than
what the log holds switches to a bootstrap when the registration allows it
(`bootstrap=True`), and fails loudly when it does not; a checkpoint saved
during a bootstrap continues that bootstrap, or, without `bootstrap=True`,
fails loudly too (its consumers have no bootstrap callbacks to finish it).

Incarnation: every checkpoint records the topic's (DescribeTopic's at open).
A checkpoint of another incarnation (the topic was deleted and created again;
a file store keeps checkpoints across that) is one no SCN of the new log can
resume: it is handled as a checkpoint older than the log (bootstrap, or
`CheckpointOtherIncarnation`), whatever the new log's length. Every reader and
bootstrap is asked of the topic's incarnation, so the broker refuses one made
again after that look (`TopicRecreated`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import grpc
import grpc.aio

from sdk import errors
from sdk.bootstrap import BootstrapPosition
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus.checkpoint_values import (
    ahead_of_log,
    checked_position,
    is_other_incarnation,
    other_incarnation_problem,
)
from sdk.databus.config import DatabusConfig
from sdk.databus.connection import BrokerLink
from sdk.databus.errors import CheckpointOtherIncarnation
from sdk.databus.inbox import PassedItem, PieceItem
from sdk.databus.log_bootstrap import BootstrapStart, read_bootstrap
from sdk.databus.pieces import record_pieces
from sdk.producer_connect import partition_count
from sdk.read_batch import PassedPosition
from sdk.reader import Reader, Start
from sdk.reconnect import ConnectionCallback
from sdk.security import ClientSecurity
from sdk.stores.protocols import CheckpointStore
from sdk.stores.records import Checkpoint

_log = logging.getLogger("keybus.databus")


class LogWindows(BrokerLink):
    """A registration's windows from the log (see the module docstring)."""

    def __init__(self, broker: str, topic: str, *, name: str, config: DatabusConfig,
                 need_slots: bool, partitions: list[int] | None, start: Start,
                 key_filter: pb.KeyFilter | None, checkpoints: CheckpointStore | None,
                 namespace: str, bootstrap: bool = False,
                 sources: list[str] | None = None, security: ClientSecurity | None = None,
                 on_connection_change: ConnectionCallback | None = None) -> None:
        super().__init__(broker, topic, name, config, need_slots, security,
                         on_connection_change)
        self.partitions = partitions
        self.start = start
        self.key_filter = key_filter
        self.checkpoints = checkpoints
        self.namespace = namespace
        self.bootstrap = bootstrap
        self.sources = sources
        self.starts: dict[int, Start | BootstrapStart] = {}
        # The topic's incarnation (DescribeTopic's at open; "" = the broker names none):
        # every read and bootstrap is asked of it and every checkpoint records it.
        self.incarnation = ""
        self._readers: dict[int, Reader] = {}  # opened by open(), taken by the read tasks
        self._resumed_after: dict[int, int] = {}  # partition -> its checkpoint's offset
        self._tasks: list[asyncio.Task[None]] = []

    async def open(self) -> None:
        """Find the partitions and their checkpoints, open a reader each (a
        "latest" start is fixed when this returns), start one reader task each.

        Raises:
            TopicNotFound, ValueError (a partition the topic lacks), Unavailable
            (no broker reached within connect_timeout_ms).
        """
        self._connect()
        info = await self.describe_topic()
        self.incarnation = info.incarnation
        partitions = self._partitions(partition_count(info))
        logs = {p.partition: p for p in info.partitions}
        for partition in partitions:
            self.starts[partition] = await self._start_of(partition, logs[partition].start_offset,
                                                          logs[partition].end_offset)
        self._readers = {p: self._reader(p, start) for p, start in self.starts.items()
                         if not isinstance(start, BootstrapStart)}
        # "latest" becomes each partition's log end now, before the registration calls
        # on_start_consumption: every event stored after that callback is delivered
        await asyncio.gather(*(reader.open() for reader in self._readers.values()))
        await self._check_resumed()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._read(p), name=f"keybus-databus-{self.name}-{p}")
                       for p in partitions]

    def _partitions(self, count: int) -> list[int]:
        if self.partitions is None:
            return list(range(count))
        wrong = [p for p in self.partitions if not 0 <= p < count]
        if wrong:
            raise ValueError(f"partitions {wrong} are invalid: topic {self.topic} has "
                             f"partitions 0..{count - 1}")
        return sorted(set(self.partitions))

    @property
    def channel(self) -> grpc.aio.Channel | None:
        return self._channel

    async def _start_of(self, partition: int, log_start: int,
                        log_end: int) -> Start | BootstrapStart:
        """Where a partition begins: after its checkpoint, else the registration's start.

        Raises:
            OffsetOutOfRange: the checkpoint is older than the log and the
                registration does not allow bootstrap.
            FailedPrecondition: the checkpoint was saved during a bootstrap and
                the registration does not allow bootstrap.
            CheckpointOtherIncarnation: the checkpoint is of another incarnation
                of the topic and the registration does not allow bootstrap.
            ValueError: the checkpoint holds values no registration writes
                (checkpoint_values.py).
        """
        checkpoint = None
        if self.checkpoints is not None:
            checkpoint = await self.checkpoints.get_checkpoint(self.namespace, self.topic,
                                                               self.name, partition)
        if checkpoint is None:
            return self._bootstrap_start() if self.start == "bootstrap" else self.start
        position = checked_position(checkpoint)
        if is_other_incarnation(checkpoint, self.incarnation):
            return self._recreated(checkpoint, log_start, log_end)
        if position is not None:  # a bootstrap was under way: go on with it
            if not self.bootstrap:
                raise errors.FailedPrecondition(
                    f"the checkpoint of {self.name} on {self.topic}/{partition} was saved "
                    f"during a bootstrap (phase {position.phase}, scn {checkpoint.scn}); "
                    "register with bootstrap=True and combined consumers "
                    "(DatabusCombinedConsumerBase) to finish it, or remove that checkpoint "
                    f"(consumer group {self.name!r}) to start over")
            return BootstrapStart(position, checkpoint.scn, self.incarnation or None)
        if ahead_of_log(checkpoint, log_end):
            _log.warning("%s: partition %d's checkpoint (offset %d, scn %d) is past the end of "
                         "%s/%d (offset %d): waiting for the log to pass it; if the topic was "
                         "deleted and created again, remove the checkpoint (consumer group "
                         "%r) to read it from the start", self.name, partition,
                         checkpoint.offset, checkpoint.scn, self.topic, partition, log_end,
                         self.name)
        if checkpoint.offset + 1 >= log_start:
            self._resumed_after[partition] = checkpoint.offset
            return {"scn": checkpoint.scn + 1}
        return self._behind(partition, checkpoint.offset, log_start)

    def _recreated(self, checkpoint: Checkpoint, log_start: int,
                   log_end: int) -> BootstrapStart:
        """A partition whose checkpoint is of another incarnation of the topic:
        as a checkpoint retention passed (`_behind`), bootstrap the new topic,
        or fail, never resume after it (its SCN would skip the new windows).

        Raises:
            CheckpointOtherIncarnation: the registration does not allow bootstrap.
        """
        problem = other_incarnation_problem(checkpoint, self.incarnation, log_start, log_end)
        if self.bootstrap:
            _log.warning("%s: %s; bootstrapping incarnation %r from its compacted view instead "
                         "(bootstrap=True)", self.name, problem, self.incarnation)
            return self._bootstrap_start()
        raise CheckpointOtherIncarnation(
            f"{problem}. Register with bootstrap=True (combined consumers) to bootstrap the "
            f"new topic from its compacted view, or remove that checkpoint (consumer group "
            f"{self.name!r}) to read the new topic from the registration's start")

    def _bootstrap_start(self) -> BootstrapStart:
        """A new bootstrap, of the topic's incarnation (the broker refuses another)."""
        return BootstrapStart(incarnation=self.incarnation or None)

    async def _check_resumed(self) -> None:
        """Look at where the logs start again, now that the reads are open.

        A read from `{"scn": n}` below the log's start begins at the start,
        without an error: retention that passed a checkpoint after `open` looked
        at the log (a slow checkpoint store) would otherwise be a gap nobody
        hears of. Once open, a read goes on by offset and gets OUT_OF_RANGE
        itself, so one more look closes the window.
        """
        if not self._resumed_after:
            return
        info = await self.describe_topic()
        for log in info.partitions:
            offset = self._resumed_after.get(log.partition)
            if offset is None or offset + 1 >= log.start_offset:
                continue
            self.starts[log.partition] = self._behind(log.partition, offset, log.start_offset)
            await self._readers.pop(log.partition).close()

    def _behind(self, partition: int, offset: int, log_start: int) -> BootstrapStart:
        """A partition whose checkpoint (`offset`) is older than the log: bootstrap.

        Raises:
            OffsetOutOfRange: the registration does not allow bootstrap.
        """
        if self.bootstrap:
            _log.info("%s: partition %d's checkpoint (offset %d) is older than the log (from "
                      "%d): bootstrapping", self.name, partition, offset, log_start)
            return self._bootstrap_start()
        raise errors.OffsetOutOfRange(
            f"the checkpoint of {self.name} on {self.topic}/{partition} is at offset "
            f"{offset}, but retention removed the log below offset {log_start}: "
            "events are missing. Register with bootstrap=True to start from the compacted "
            "view, or start over", grpc.StatusCode.OUT_OF_RANGE)

    async def _read(self, partition: int) -> None:
        start = self.starts[partition]
        try:
            if isinstance(start, BootstrapStart):
                await read_bootstrap(self, partition, start)
            else:
                await self._read_log(partition, start)
        except errors.KeybusError as e:
            self.inbox.put_failure(e)
        except Exception as e:  # a bug must end consumption loudly, not hang it
            _log.exception("reading partition %d of %s failed", partition, self.topic)
            self.inbox.put_failure(e)

    def _reader(self, partition: int, start: Start) -> Reader:
        return Reader(self.broker, self.topic, partition, start=start,
                      key_filter=self.key_filter, follow=True,
                      bytes_max=self.config.reader_bytes_max, channel=self._channel,
                      on_connection_change=self.connection_changed,
                      incarnation=self.incarnation or None)

    async def _read_log(self, partition: int, start: Start) -> None:
        """Follow the log; if retention outruns the reader, bootstrap (if allowed)."""
        reader = self._readers.pop(partition, None) or self._reader(partition, start)
        put = self.inbox.put
        need_slots = self.need_slots
        try:
            async for item in reader.items():
                if isinstance(item, PassedPosition):  # windows with nothing for this filter
                    await put(PassedItem(partition, item.offset, item.scn))
                    continue
                for piece in record_pieces(item.record, need_slots):
                    await put(PieceItem(piece, True))
            return
        except errors.OffsetOutOfRange:
            if not self.bootstrap:
                raise
            _log.info("%s: partition %d fell behind retention: bootstrapping", self.name,
                      partition)
        finally:
            await reader.close()
        # of the topic the log was read in: one made again meanwhile is refused
        await read_bootstrap(self, partition, BootstrapStart(incarnation=reader.incarnation))

    async def persist(self, partition: int, offset: int, scn: int,
                      position: object = None) -> None:
        if self.checkpoints is None:
            return
        bootstrap = (json.dumps(position.to_dict()) if isinstance(position, BootstrapPosition)
                     else "")
        await self.checkpoints.update_checkpoint(Checkpoint(
            self.namespace, self.topic, self.name, partition, offset, scn, bootstrap=bootstrap,
            incarnation=self.incarnation))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        for reader in self._readers.values():  # opened, but open() failed before the tasks
            await reader.close()
        self._readers = {}
        await self._disconnect()

