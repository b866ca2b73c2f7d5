"""The async consumer: subscribe, receive, acknowledge.

A background task keeps one Subscribe stream open (reconnecting with capped
backoff when the broker goes away, reported through `on_connection_change`;
see sdk/reconnect.py), puts deliveries in a bounded buffer
(`fetch_buffer.py`) and grants permits back as the application takes
events. Acks are collected and leave as merged offset ranges, one message
per partition every `ack_flush_ms`. Range changes (Key_Shared) and
active/inactive changes (Failover) reach the application as callbacks.

Runs on one asyncio event loop: create, use and close a Consumer there.
`SyncConsumer` (sync_consumer.py) is the blocking face.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

import grpc
import grpc.aio

from sdk import errors
from sdk.consumer_ack_timer import AckTimer
from sdk.consumer_channel import ConsumerChannel
from sdk.consumer_config import MODES, TYPES, ConsumerConfig, check_ack_offsets, check_nack_delay
from sdk.consumer_link import RETRIABLE, ConsumerLink
from sdk.consumer_state import ConsumerState
from sdk.consumer_wakeups import Arrivals, FlushSignal
from sdk.core.columns import batch_slots
from sdk.core.model import HashRange
from sdk.core.pb import keybus_pb2 as pb
from sdk.fetch_buffer import FetchBuffer, NackHolds
from sdk.received import (
    Message,
    ReceivedBatch,
    batch_without,
    delivered_batches,
    partition_dropped,
    rest_of_slots_removed,
)
from sdk.reconnect import ConnectionCallback, ended_on_write, log_connection_change, reauthenticates
from sdk.retrying_call import cancelling
from sdk.security import ClientSecurity
from sdk.stream import SubscribeStream

__all__ = ["MODES", "TYPES", "ActiveCallback", "Consumer", "ConsumerConfig", "Message",
           "RangeCallback", "ReceivedBatch"]

RangeCallback = Callable[[int, list[HashRange]], Any]
ActiveCallback = Callable[[int, bool], Any]


class Consumer:
    """Async consumer of one subscription. Make one with `await Consumer.subscribe(...)`."""

    def __init__(self, broker: str = "localhost:6650", topic: str = "", subscription: str = "",
                 config: ConsumerConfig | None = None, channel: grpc.aio.Channel | None = None,
                 on_range_change: RangeCallback | None = None,
                 on_active_change: ActiveCallback | None = None,
                 on_connection_change: ConnectionCallback | None = None,
                 security: ClientSecurity | None = None, **options: Any) -> None:
        """Arguments as `subscribe`; the consumer attaches on `async with`
        (or use `await Consumer.subscribe(...)`, attached when it returns)."""
        if config is not None and options:
            raise ValueError(f"pass either config or settings as keywords, not both: "
                             f"{sorted(options)}")
        config = config or ConsumerConfig.of(options)
        self.broker = broker
        self.topic = topic
        self.subscription = subscription
        self.config = config
        self.name = config.consumer_name or f"consumer-{uuid.uuid4().hex[:12]}"
        self._open = config.open_request(topic, subscription, self.name)
        self._conn = ConsumerChannel(broker, topic, config.connect_timeout_ms, channel, security)
        self._on_range_change = on_range_change
        self._on_active_change = on_active_change
        self._on_connection_change = on_connection_change or log_connection_change
        self._links = ConsumerLink(broker, topic, config.retry_policy(), config.reconnect,
                                   self._conn.channel, self._report_connection)
        self._link = self._links.link
        self._state = ConsumerState(FetchBuffer(config.receiver_queue_size,
                                                 config.receiver_queue_total_max))
        self._current: deque[Message] = deque()
        self._arrivals = Arrivals()  # receives waiting for a delivery
        self._flush = FlushSignal()  # acks gather; grants and nacks go at once
        self._stream: SubscribeStream | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._callback_tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self.partitions: list[int] = []
        self._holds = NackHolds()  # nacked slots the broker may not know of yet
        self._ordered = self.config.type != "shared"  # per-key order (the broker says on open)
        self._marks_share_ends = False  # the broker says where window shares end (on open)
        # ack_timeout_ms, timed from when the application takes an event (sdk/ack_timeouts.py)
        self._ack_timer = AckTimer(config.ack_timeout_ms, self.nack_offsets) \
            if config.ack_timeout_ms else None

    @classmethod
    async def subscribe(cls, broker: str = "localhost:6650", topic: str = "",
                        subscription: str = "", *, config: ConsumerConfig | None = None,
                        channel: grpc.aio.Channel | None = None,
                        on_range_change: RangeCallback | None = None,
                        on_active_change: ActiveCallback | None = None,
                        on_connection_change: ConnectionCallback | None = None,
                        security: ClientSecurity | None = None,
                        **options: Any) -> Consumer:
        """Attach to `subscription` on `topic` (created by the first consumer).

        Args:
            broker: "host:port", or several ("h1:6650,h2:6650,h3:6650"): the
                consumer then subscribes on the topic's leader and follows it
                across failovers. topic: an existing topic.
            subscription: the subscription's name.
            config / options: ConsumerConfig, or its fields as keywords.
            on_range_change: called (partition, ranges) when this consumer's
                Key_Shared hash ranges change; may be a coroutine function.
            on_active_change: called (partition, active) when Failover makes
                this consumer active or inactive on a partition.
            on_connection_change: called (False, message) when the broker is
                lost and the consumer starts retrying (see retry_timeout_ms), or
                refuses its reconnect ("the broker at H:P refuses the reconnect:
                <its reason>; retrying"), (True, message) when it is back;
                may be a coroutine function.
            security: TLS and credentials (sdk.security.ClientSecurity); None =
                the ambient default, else plain text.
        Returns:
            An attached Consumer.
        Raises:
            ValueError: a bad setting. TopicNotFound, InvalidArgument,
            FailedPrecondition (e.g. a second Exclusive consumer, a sticky
            range overlap naming the other consumer, another type), Unavailable.
        """
        consumer = cls(broker, topic, subscription, config, channel, on_range_change,
                       on_active_change, on_connection_change, security, **options)
        await consumer._attach()
        return consumer

    async def _attach(self) -> None:
        """Open the stream and start the background tasks."""
        try:
            await self._connect(reconnecting=False)
        except BaseException:
            await self._conn.close()
            raise
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._receive_loop(), name="keybus-consumer"),
                       loop.create_task(self._flush_loop(), name="keybus-consumer-acks")]

    # ------------------------------------------------------------ receiving

    async def receive(self, timeout_s: float | None = None) -> Message:
        """The next event.

        Raises:
            TimeoutError: none within timeout_s. KeybusError: the consumer failed.
            ConsumerClosed-like KeybusError after close().
        """
        if not self._current:
            batch = await self._next_batch(timeout_s)
            self._current.extend(batch.messages())
        message = self._current.popleft()
        if self._ack_timer is not None:
            self._ack_timer.taken(message.partition, (message.offset,), (message.event.slot,))
        return message

    async def receive_batch(self, timeout_s: float | None = None) -> ReceivedBatch:
        """The next delivered batch (the events of one stored record), columns as protobuf.

        Raises:
            TimeoutError, KeybusError: as receive().
        """
        batch = await self._next_batch(timeout_s)
        if self._ack_timer is not None:
            self._ack_timer.taken(batch.partition, batch.offsets, batch_slots(batch.record.batch))
        return batch

    async def _next_batch(self, timeout_s: float | None) -> ReceivedBatch:
        state = self._state
        if not self._tasks and not self._closed:
            raise errors.KeybusError("this consumer is not attached: use `await "
                                     "Consumer.subscribe(...)` or `async with Consumer(...)`",
                                     errors.FAILED_PRECONDITION)
        buffer = state.buffer
        # set on the first wait: a batch already buffered needs no timer
        loop: asyncio.AbstractEventLoop | None = None
        deadline: float | None = None
        while True:
            batch = buffer.take()
            if batch is not None:
                if buffer.grant_wanted():
                    self._flush.soon()
                return batch
            if state.error is not None:
                raise state.error
            if self._closed:
                raise errors.KeybusError("the consumer is closed", errors.CANCELLED)
            if loop is None:
                loop = asyncio.get_running_loop()
                deadline = None if timeout_s is None else loop.time() + timeout_s
            await self._arrivals.wait(loop, deadline)

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except errors.KeybusError:
            if self._closed and self._state.error is None:
                raise StopAsyncIteration from None
            raise

    # ------------------------------------------------------------ acknowledging

    def ack(self, message: Message) -> None:
        """Acknowledge one event (sent with the next flush)."""
        self._ack_offsets(message.partition, (message.offset,))

    def ack_batch(self, batch: ReceivedBatch) -> None:
        """Acknowledge every event of a received batch."""
        record = batch.record
        offsets = record.offsets
        if self._ack_timer is not None:
            self._ack_timer.timeouts.forget(batch.partition, batch.offsets)
        if not offsets:  # a whole stored record: one range
            base = record.base_offset
            self._state.acks.add_range(batch.partition, base, base + record.batch.count)
        elif batch.send:  # a part of a record: one range of its send, whatever its offsets
            self._state.acks.add_sent(batch.partition, batch.send, offsets[0], offsets[-1] + 1)
        else:
            self._ack_offsets(batch.partition, offsets)
            return
        self._flush.want()

    def ack_offsets(self, partition: int, offsets: Iterable[int]) -> None:
        """Acknowledge these offsets of `partition`.

        Raises:
            ValueError: a partition not this consumer's, or an offset not an int >= 0.
        """
        self._ack_offsets(partition, check_ack_offsets(partition, offsets, self.partitions))

    def _ack_offsets(self, partition: int, offsets: Iterable[int]) -> None:
        if self._ack_timer is not None:
            offsets = list(offsets)
            self._ack_timer.timeouts.forget(partition, offsets)
        self._state.acks.add(partition, offsets)
        self._flush.want()

    def ack_cumulative(self, message: Message) -> None:
        """Acknowledge this event and every earlier one of its partition
        (Exclusive and Failover only)."""
        partition = message.partition
        self._state.cumulative[partition] = max(self._state.cumulative.get(partition, 0),
                                                message.offset + 1)
        if self._ack_timer is not None:
            self._ack_timer.timeouts.forget_below(partition, message.offset + 1)
        self._flush.want()

    def nack(self, message: Message | ReceivedBatch, delay_ms: int | None = None) -> None:
        """Give events back for redelivery after delay_ms (default: config.nack_delay_ms,
        0 = the broker's default). Later events of the same key wait for the retry.

        Raises:
            ValueError: delay_ms not an int 0..2**32-1 (the broker refuses, ending the
            stream with INVALID_ARGUMENT, one above its nack_delay_ms_max).
        """
        if isinstance(message, Message):
            self.nack_offsets(message.partition, [message.offset], delay_ms,
                              [message.event.slot])
        else:
            self.nack_offsets(message.partition, message.offsets, delay_ms, list(message.slots))

    def nack_offsets(self, partition: int, offsets: Sequence[int], delay_ms: int | None = None,
                     slots: Sequence[int] | None = None) -> None:
        """Give these offsets of `partition` back (see nack). With their `slots`, the
        rest of those slots after them that this consumer holds goes back too
        (prefetched here, or still on its way: a delivery the broker sent before it
        saw this nack loses those events as it arrives), so the retry is not
        overtaken; acks of them are then ignored: they come again, after it."""
        delay = self.config.nack_delay_ms if delay_ms is None else check_nack_delay(delay_ms)
        given = list(offsets)
        if self._ack_timer is not None:
            self._ack_timer.timeouts.forget(partition, given)
        rest: list[int] = []
        if slots is not None and self._ordered:  # Shared keeps no order: nothing to hold
            first: dict[int, int] = {}
            for offset, slot in zip(offsets, slots, strict=True):
                first[slot] = min(first.get(slot, offset), offset)
            rest = self._holds.nacked(partition, offsets, slots)
            if self._ack_timer is not None:  # the broker takes them back, as what follows
                self._ack_timer.timeouts.forget_after(partition, first)
            # what it drops the broker takes back with `rest`, as not failed (in the
            # nack's offsets it counted toward max_redeliveries, unseen)
            self._current, _ = rest_of_slots_removed(
                self._state.buffer, self._current, partition, first)
        self._state.nacks.append((partition, given, delay, rest))
        self._holds.queue()  # the broker counts them: Delivery.nacks_seen
        self._flush.soon()

    async def flush_acks(self) -> None:
        """Send every pending ack and nack now."""
        await self._send_pending()

    # ------------------------------------------------------------ state

    @property
    def hash_ranges(self) -> dict[int, list[HashRange]]:
        """partition -> this consumer's current Key_Shared ranges."""
        return {p: list(r) for p, r in self._state.ranges.items()}

    @property
    def stream(self) -> SubscribeStream | None:
        """The Subscribe stream open now; what the buffer holds came on it (a reconnect
        makes a new stream and empties the buffer in the same step)."""
        return self._stream

    @property
    def active(self) -> dict[int, bool]:
        """partition -> whether Failover made this consumer active there."""
        return dict(self._state.active)

    # ------------------------------------------------------------ background

    async def _connect(self, reconnecting: bool) -> None:
        """Open a stream (retrying while the broker is away) and grant the initial permits."""
        while True:
            if not await self._conn.find_leader(self._links, reconnecting, self.config.reconnect):
                continue
            assert self._conn.stub is not None
            stream = SubscribeStream(self._conn.stub, self._open)
            try:
                opened = await stream.open()
                break
            except grpc.aio.AioRpcError as e:
                stream.close()
                if self._closed or cancelling():  # gRPC may turn a cancel into CANCELLED
                    raise asyncio.CancelledError from None
                await self._links.open_failed(e, reconnecting)  # waits, or raises
        self._links.connected()
        self._stream = stream
        self._holds.reset(len(self._state.nacks))  # still to go, on this stream
        self.partitions = list(opened.partitions)
        self._ordered, self._marks_share_ends = opened.type != pb.SHARED, opened.marks_share_ends
        self._state.buffer.reset()
        self._current.clear()
        if self._ack_timer is not None:  # the broker gives back what was unacknowledged
            self._ack_timer.timeouts.clear()
        for partition, count in self._state.buffer.initial_grants(self.partitions):
            await stream.send(pb.SubscribeRequest(permits=pb.Permits(partition=partition,
                                                                     count=count)))
        self._flush.want()

    async def _receive_loop(self) -> None:
        try:
            while True:
                assert self._stream is not None
                try:
                    response = await self._stream.read()
                except grpc.aio.AioRpcError as e:
                    if self._closed:
                        return
                    self._stream.close()
                    if self.config.reconnect and reauthenticates(e):  # credentials expired
                        await self._conn.renew(self._links)
                        await self._connect(reconnecting=True)  # a refusal raises: rule 6
                        continue
                    if not self.config.reconnect or e.code() not in RETRIABLE:
                        raise errors.from_rpc_error(e, self.broker) from None
                    if not (ended_on_write(e) and  # the broker may be there: ask it at once
                            self._links.defer_report(e)):
                        await self._links.retry_after(e)
                    await self._connect(reconnecting=True)
                    continue
                if response is None:
                    if self._closed:
                        return
                    self._stream.close()
                    await self._connect(reconnecting=True)
                    continue
                self._handle(response)
        except errors.KeybusError as e:
            self._state.error = e
            self._arrivals.wake()

    def _report_connection(self, connected: bool, message: str) -> None:
        self._callback(self._on_connection_change, connected, message)

    def _handle(self, response: pb.SubscribeResponse) -> None:
        body = response.WhichOneof("body")
        if body == "delivery":
            delivery = response.delivery
            records = delivery.records  # one partition's: its dispatcher's send
            stale = bool(records) and self._holds.seen(delivery.nacks_seen,
                                                       records[0].partition)
            put = self._state.buffer.put
            for batch in delivered_batches(delivery, self._marks_share_ends):
                kept = self._drop_stale(batch) if stale else batch
                if kept is not None:
                    put(kept.record.partition, kept.record.batch.count, kept)
            self._arrivals.wake()
        elif body == "range_change":
            change = response.range_change
            ranges = [HashRange(r.slot_first, r.slot_last) for r in change.ranges]
            self._state.ranges[change.partition] = ranges
            self._callback(self._on_range_change, change.partition, ranges)
        elif body == "active_change":
            active = response.active_change
            self._state.active[active.partition] = active.active
            self._callback(self._on_active_change, active.partition, active.active)
        elif body == "seeked":  # what is buffered of the partition is from before the seek
            self._current = partition_dropped(self._state.buffer, self._current,
                                              response.seeked.partition)
            if self._ack_timer is not None:
                self._ack_timer.timeouts.forget_partition(response.seeked.partition)
            self._flush.soon()  # their permits

    def _drop_stale(self, batch: ReceivedBatch) -> ReceivedBatch | None:
        """Events of a nacked slot after its nacked offset, sent before the broker saw
        the nack: the broker took them back with it (`Nack.rest_of_slots`) and sends
        them again after the retry; drop them here (their permits come back)."""
        partition = batch.partition
        drop = self._holds.stale_positions(partition, batch.offsets, batch.slots)
        if not drop:
            return batch
        self._state.buffer.count_taken(partition, len(drop))
        self._flush.soon()
        return batch_without(batch, set(drop))

    def _callback(self, callback: Callable[..., Any] | None, *args: Any) -> None:
        if callback is None:
            return
        result = callback(*args)
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._callback_tasks.add(task)
            task.add_done_callback(self._callback_tasks.discard)

    async def _flush_loop(self) -> None:
        """Send what is pending: acks after gathering for ack_flush_ms, permit grants
        and nacks at once (sdk/consumer_wakeups.py)."""
        flush_s = self.config.ack_flush_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            await self._flush.next_flush(loop, flush_s, self._state.buffer.grant_wanted)
            with contextlib.suppress(asyncio.QueueFull):
                await self._send_pending()

    async def _send_pending(self) -> None:
        stream = self._stream
        if stream is None:
            return
        for request in self._state.drain_requests():
            await stream.send(request)

    # ------------------------------------------------------------ closing

    async def close(self) -> None:
        """Send pending acks, end the stream, close the channel. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._ack_timer is not None:
            self._ack_timer.close()
        with contextlib.suppress(Exception):
            await self._send_pending()
        if self._stream is not None:
            self._stream.half_close()  # the broker ends the stream once the acks are in
            if self._tasks:
                with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
                    async with asyncio.timeout(2.0):
                        await asyncio.shield(self._tasks[0])
            self._stream.cancel()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._arrivals.wake()
        await self._conn.close()

    async def __aenter__(self) -> Consumer:
        if not self._tasks and not self._closed:
            await self._attach()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()
