"""Windows read from the log: one following Reader per partition, from the checkpoint.

The source behind `DatabusClient.register`. Each partition starts at the
first window after its checkpoint (`{"scn": checkpoint.scn + 1}`), else at
the registration's start position, and is read with the registration's
server-side filter. A read returns whole stored records, so every window
arrives whole: the runner never sees a window cut by the transport. Readers
reconnect on their own (following reads retry forever); `ConnectionWatch`
turns a long outage into a notice so that consumers and logs hear of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import open_channel, stub_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus.config import DatabusConfig
from sdk.databus.inbox import Inbox, PieceItem
from sdk.databus.pieces import record_pieces
from sdk.reader import Reader, Start
from sdk.stores.protocols import CheckpointStore
from sdk.stores.records import Checkpoint

_log = logging.getLogger("keybus.databus")


class ConnectionWatch:
    """Says once per outage that the channel has not been ready for `report_ms`."""

    def __init__(self, channel: grpc.aio.Channel, broker: str, report_ms: int) -> None:
        self.channel = channel
        self.broker = broker
        self.report_ms = report_ms
        self._down_since_ms: int | None = None
        self._reported = False

    def ready(self) -> bool:
        """Whether the channel is connected now."""
        return self.channel.get_state(try_to_connect=False) is grpc.ChannelConnectivity.READY

    def check(self, now_ms: int) -> Exception | None:
        """A notice to report now, or None."""
        state = self.channel.get_state(try_to_connect=False)
        if state is grpc.ChannelConnectivity.READY:
            if self._reported:
                _log.warning("broker %s is reachable again; consumption goes on", self.broker)
            self._down_since_ms, self._reported = None, False
            return None
        if self._down_since_ms is None:
            self._down_since_ms = now_ms
        down_ms = now_ms - self._down_since_ms
        if self._reported or down_ms < self.report_ms:
            return None
        self._reported = True
        _log.warning("broker %s unreachable for %d ms; reconnecting", self.broker, down_ms)
        return errors.Unavailable(f"broker {self.broker} unreachable for {down_ms} ms "
                                  f"(channel {state.name}); still reconnecting, windows resume "
                                  "where they stopped")


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class LogWindows:
    """A registration's windows from the log (see the module docstring)."""

    def __init__(self, broker: str, topic: str, *, name: str, config: DatabusConfig,
                 need_slots: bool, partitions: list[int] | None, start: Start,
                 key_filter: pb.KeyFilter | None, checkpoints: CheckpointStore | None,
                 namespace: str) -> None:
        self.broker = broker
        self.topic = topic
        self.name = name
        self.config = config
        self.need_slots = need_slots
        self.partitions = partitions
        self.start = start
        self.key_filter = key_filter
        self.checkpoints = checkpoints
        self.namespace = namespace
        self.inbox = Inbox(config.prefetch_windows_max)
        self.starts: dict[int, Start] = {}
        self._channel: grpc.aio.Channel | None = None
        self._watch: ConnectionWatch | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def open(self) -> None:
        """Find the partitions and their checkpoints, start one reader task each.

        Raises:
            TopicNotFound, ValueError (a partition the topic lacks), Unavailable.
        """
        self._channel = open_channel(self.broker)
        self._watch = ConnectionWatch(self._channel, self.broker, self.config.unavailable_report_ms)
        partitions = await self._partitions()
        for partition in partitions:
            self.starts[partition] = await self._start_of(partition)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._read(p), name=f"keybus-databus-{self.name}-{p}")
                       for p in partitions]

    async def _partitions(self) -> list[int]:
        assert self._channel is not None
        try:
            info = await stub_of(self._channel).DescribeTopic(
                pb.DescribeTopicRequest(topic=self.topic), timeout=30)
        except grpc.aio.AioRpcError as e:
            raise errors.from_rpc_error(e) from None
        count = info.config.partitions
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

    def health(self, now: int) -> Exception | None:
        return self._watch.check(now) if self._watch is not None else None

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
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
