"""Windows read from the log: one following Reader per partition, from the checkpoint.

The source behind `DatabusClient.register`. Each partition starts at the
first window after its checkpoint (`{"scn": checkpoint.scn + 1}`), else at
the registration's start position, and is read with the registration's
server-side filter. A read returns whole stored records, so every window
arrives whole: the runner never sees a window cut by the transport. Readers
reconnect on their own (following reads retry forever); the link's
`ConnectionWatch` turns a long outage into a notice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sdk import errors
from sdk.channel import stub_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus.config import DatabusConfig
from sdk.databus.connection import BrokerLink
from sdk.databus.inbox import PieceItem
from sdk.databus.pieces import record_pieces
from sdk.producer import _partitions_of as partitions_of
from sdk.reader import Reader, Start
from sdk.stores.protocols import CheckpointStore
from sdk.stores.records import Checkpoint

_log = logging.getLogger("keybus.databus")


class LogWindows(BrokerLink):
    """A registration's windows from the log (see the module docstring)."""

    def __init__(self, broker: str, topic: str, *, name: str, config: DatabusConfig,
                 need_slots: bool, partitions: list[int] | None, start: Start,
                 key_filter: pb.KeyFilter | None, checkpoints: CheckpointStore | None,
                 namespace: str) -> None:
        super().__init__(broker, topic, name, config, need_slots)
        self.partitions = partitions
        self.start = start
        self.key_filter = key_filter
        self.checkpoints = checkpoints
        self.namespace = namespace
        self.starts: dict[int, Start] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def open(self) -> None:
        """Find the partitions and their checkpoints, start one reader task each.

        Raises:
            TopicNotFound, ValueError (a partition the topic lacks), Unavailable.
        """
        self._connect()
        partitions = await self._partitions()
        for partition in partitions:
            self.starts[partition] = await self._start_of(partition)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._read(p), name=f"keybus-databus-{self.name}-{p}")
                       for p in partitions]

    async def _partitions(self) -> list[int]:
        assert self._channel is not None
        count = await partitions_of(stub_of(self._channel), self.topic, 30_000)
        if self.partitions is None:
            return list(range(count))
        wrong = [p for p in self.partitions if not 0 <= p < count]
        if wrong:
            raise ValueError(f"partitions {wrong} are invalid: topic {self.topic} has "
                             f"partitions 0..{count - 1}")
        return sorted(set(self.partitions))

    async def _start_of(self, partition: int) -> Start:
        if self.checkpoints is not None:
            checkpoint = await self.checkpoints.get_checkpoint(self.namespace, self.topic,
                                                               self.name, partition)
            if checkpoint is not None:
                return {"scn": checkpoint.scn + 1}
        return self.start

    async def _read(self, partition: int) -> None:
        reader = Reader(self.broker, self.topic, partition, start=self.starts[partition],
                        key_filter=self.key_filter, follow=True,
                        bytes_max=self.config.reader_bytes_max, channel=self._channel)
        put = self.inbox.put
        need_slots = self.need_slots
        try:
            async for batch in reader:
                for piece in record_pieces(batch.record, need_slots):
                    await put(PieceItem(piece, True))
        except errors.KeybusError as e:
            self.inbox.put_failure(e)
        except Exception as e:  # a bug must end consumption loudly, not hang it
            _log.exception("reading partition %d of %s failed", partition, self.topic)
            self.inbox.put_failure(e)
        finally:
            await reader.close()

    async def persist(self, partition: int, offset: int, scn: int) -> None:
        if self.checkpoints is None:
            return
        await self.checkpoints.update_checkpoint(Checkpoint(
            self.namespace, self.topic, self.name, partition, offset, scn))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self._disconnect()
