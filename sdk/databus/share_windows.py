"""Windows from a Key_Shared subscription: the callback consumer across processes.

The source behind `DatabusClient.register_shared`. An SDK `Consumer`
attaches to a Key_Shared subscription, so several processes share the
stream by hash range; each delivery says where each record's window ends,
and `ShareAssembler` (framing.py) turns the deliveries into this process's
share of each window. Progress is the subscription's cursor: a checkpoint
acknowledges the events of the windows it covers (whole windows only), so
a restarted process gets every unacknowledged window again, whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from sdk import errors
from sdk.consumer import Consumer, ConsumerConfig, ReceivedBatch
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus.config import DatabusConfig
from sdk.databus.connection import BrokerLink, now_ms
from sdk.databus.errors import WindowTooLarge
from sdk.databus.event import EventColumns, merge_records
from sdk.databus.framing import Abort, Emit, Output, Overflow, Part, ShareAssembler
from sdk.databus.inbox import AbortItem, PieceItem
from sdk.databus.pieces import record_pieces
from sdk.databus.window import WindowPiece
from sdk.reconnect import ConnectionCallback
from sdk.security import ClientSecurity
from sdk.stream import SubscribeStream

_log = logging.getLogger("keybus.databus")
_IDLE_RECEIVE_S = 0.5
_CONFIRM_TIMEOUT_S = 2.0  # a round trip to the broker that says the stream is up
SUBSCRIPTION_TYPES = ("key_shared", "exclusive", "failover")


class ShareWindows(BrokerLink):
    """A registration's windows from a subscription (see the module docstring)."""

    def __init__(self, broker: str, topic: str, subscription: str, *, name: str,
                 config: DatabusConfig, need_slots: bool, consumer_config: ConsumerConfig,
                 security: ClientSecurity | None = None,
                 on_connection_change: ConnectionCallback | None = None) -> None:
        if consumer_config.type not in SUBSCRIPTION_TYPES:
            raise ValueError(f"subscription type {consumer_config.type!r} cannot carry windows "
                             f"(no per-key order); allowed: {', '.join(SUBSCRIPTION_TYPES)}")
        super().__init__(broker, topic, name, config, need_slots, security,
                         on_connection_change)
        self.subscription = subscription
        self.consumer_config = consumer_config
        self.consumer: Consumer | None = None
        self._assembler = ShareAssembler(config.window_buffering, config.window_linger_ms,
                                         config.window_bytes_max)
        # Windows handed to the runner, in order: (partition, scn, offsets), until acknowledged;
        # and the same offsets per partition, to drop a redelivery of what was handed already.
        self._handed: deque[tuple[int, int, list[int]]] = deque()
        self._handed_offsets: dict[int, set[int]] = {}
        self._task: asyncio.Task[None] | None = None
        self._parts_stream: SubscribeStream | None = None  # the stream of the last part

    async def open(self) -> None:
        """Attach the consumer and start receiving.

        Raises:
            TopicNotFound, FailedPrecondition (e.g. another subscription type),
            Unavailable (no broker reached within connect_timeout_ms), ValueError
            (a bad consumer setting).
        """
        channel = self._connect()
        await self.describe_topic()  # a broker not there yet: waited for and said, as `register`
        self.consumer = await Consumer.subscribe(self.broker, self.topic, self.subscription,
                                                 config=self.consumer_config, channel=channel,
                                                 on_connection_change=self.connection_changed)
        self._task = asyncio.get_running_loop().create_task(
            self._receive(self.consumer), name=f"keybus-databus-{self.name}")

    async def _receive(self, consumer: Consumer) -> None:
        assembler = self._assembler
        linger_s = self.config.window_linger_ms / 1000
        watch = self._watch
        assert watch is not None
        connected = True
        # The assembler's clock counts only time spent waiting for deliveries: while this
        # loop waits for room in the inbox (a slow consumer), a share must not linger out.
        waited_ms = 0
        try:
            while True:
                wait_s = linger_s if assembler.holding() else _IDLE_RECEIVE_S
                began = now_ms()
                try:
                    batch = await consumer.receive_batch(wait_s)
                except TimeoutError:
                    waited_ms += now_ms() - began
                    if watch.ready():
                        connected = True
                        if assembler.lingered(waited_ms):
                            await self._emit(await self._quiet(consumer, waited_ms))
                    elif connected:  # rule 5 of framing.py: the shares come again
                        connected = False
                        await self._emit(assembler.process_reset())
                    continue
                waited_ms += now_ms() - began
                # Taken from the buffer in this step, so it came on the stream open now.
                self._parts_stream = consumer.stream
                if self._handed_already(batch):
                    continue
                await self._emit(assembler.process_part(_part_of(batch), waited_ms))
        except errors.KeybusError as e:
            self.inbox.put_failure(e)
        except Exception as e:  # a bug must end consumption loudly, not hang it
            _log.exception("receiving from %s/%s failed", self.topic, self.subscription)
            self.inbox.put_failure(e)

    async def _quiet(self, consumer: Consumer, waited_ms: int) -> list[Output]:
        """A share waited the linger (rule 1 of framing.py): the rest of its window went
        to other consumers, provided the stream that brought its parts was up all along.
        A broker killed a moment ago can still look connected, and closing then would
        present part of a window as the whole of it. So: the stream is confirmed by a
        round trip first (the shares close); gone or replaced, a reconnect redelivers
        the parts (the shares are dropped: rule 5); not confirmed yet, nothing changes
        and the next linger asks again."""
        stream = consumer.stream
        if stream is not None and stream is self._parts_stream:
            confirmed = await stream.confirm(_CONFIRM_TIMEOUT_S)
            if consumer.stream is stream:
                return self._assembler.process_idle(waited_ms) if confirmed else []
        return self._assembler.process_reset()

    async def _emit(self, outputs: list[Output]) -> None:
        for out in outputs:
            if type(out) is Emit:
                for piece, closes in self._pieces_of(out):
                    await self.inbox.put(PieceItem(piece, closes))
            elif type(out) is Abort:
                self._unhand(out.partition, out.scn)
                await self.inbox.put(AbortItem(out.partition))
            else:
                assert isinstance(out, Overflow)
                self.inbox.put_failure(WindowTooLarge(out.partition, out.scn, out.size_bytes,
                                                      self.config.window_bytes_max))

    def _handed_already(self, batch: ReceivedBatch) -> bool:
        """A reconnect redelivers every unacknowledged event, also those of windows
        handed to the runner and not yet acknowledged: those will be presented (or
        consumption ends), so they are dropped here instead of presented twice.
        Events of slots this consumer just took over were never handed: they pass."""
        handed = self._handed_offsets.get(batch.partition)
        return handed is not None and all(offset in handed for offset in batch.offsets)

    def _hand(self, partition: int, scn: int, offsets: list[int]) -> None:
        self._handed.append((partition, scn, offsets))
        self._handed_offsets.setdefault(partition, set()).update(offsets)

    def _unhand(self, partition: int, scn: int) -> None:
        """The runner rolls this window back: what was handed of it must come again."""
        dropped = [entry for entry in self._handed if entry[:2] == (partition, scn)]
        self._handed = deque(entry for entry in self._handed if entry[:2] != (partition, scn))
        handed = self._handed_offsets.get(partition, set())
        for entry in dropped:
            handed.difference_update(entry[2])

    def _pieces_of(self, out: Emit) -> list[tuple[WindowPiece, bool]]:
        if not out.parts:  # a streamed window closes with nothing new
            columns = EventColumns(_empty_record(out))
            piece = WindowPiece(out.partition, out.scn, out.window_last_offset, (), (), (), (),
                                columns)
            return [(piece, True)]
        record = merge_records([part.payload for part in out.parts])  # type: ignore[misc]
        if not record.window:
            pieces = record_pieces(record, self.need_slots)
            for piece in pieces:
                self._hand(piece.partition, piece.scn, [piece.offset_last])
            return [(piece, True) for piece in pieces]
        (piece,) = record_pieces(record, self.need_slots, out.window_last_offset)
        offsets = list(record.offsets) or list(range(record.base_offset,
                                                     record.base_offset + record.batch.count))
        self._hand(out.partition, out.scn, offsets)
        return [(piece, out.closes)]

    @property
    def windows_held(self) -> bool:
        """Whether part of a window waits in the assembler for the rest of it."""
        return self._assembler.holding()

    async def persist(self, partition: int, offset: int, scn: int,
                      position: object = None) -> None:
        """Acknowledge every window of `partition` handed up to the one at `scn`: the
        runner presents windows in the order they were handed, so all are done."""
        consumer = self.consumer
        assert consumer is not None
        handed = self._handed
        last = max((i for i, (p, s, _) in enumerate(handed) if p == partition and s == scn),
                   default=-1)
        if last < 0:
            return
        offsets = sorted({offset for i, (p, _, window) in enumerate(handed)
                          if i <= last and p == partition for offset in window})
        self._handed = deque(entry for i, entry in enumerate(handed)
                             if i > last or entry[0] != partition)
        self._handed_offsets[partition].difference_update(offsets)
        consumer.ack_offsets(partition, offsets)
        await consumer.flush_acks()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.consumer is not None:
            await self.consumer.close()
            self.consumer = None
        await self._disconnect()


def _part_of(batch: ReceivedBatch) -> Part:
    record = batch.record
    offsets = batch.offsets
    return Part(record.partition, record.scn_first, offsets[0], offsets[-1],
                batch.window_last_offset, record.window, sum(map(len, record.batch.values)),
                record, batch.share_ends)


def _empty_record(out: Emit) -> pb.Record:
    return pb.Record(partition=out.partition, scn_first=out.scn, window=True)

