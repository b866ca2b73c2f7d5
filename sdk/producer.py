"""The async producer API: `send` buffers, the batch flow drains, the Sender sends.

Work per event is kept to a validation, a slot lookup and a few list
appends (accumulator.py); protobuf objects are built per batch. `send` returns
an EventFuture that is a batch future plus an index, as Kafka's
FutureRecordMetadata is, so no asyncio.Future is made per event.

Runs on one asyncio event loop: create, use and close a Producer there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from time import monotonic as _monotonic
from types import TracebackType
from typing import Any

import grpc
import grpc.aio

from sdk import errors
from sdk.accumulator import (
    EVENT_OVERHEAD_BYTES,
    Accumulator,
    OpenBatch,
    WindowEvent,
    chunk_bounds,
    event_columns,
    extras_of,
    fill_batch,
    split_columns,
)
from sdk.batch_flow import BatchFlow
from sdk.channel import renew_channel, stub_of
from sdk.cluster import LeaderChannel
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.event_batches import columns_of_part as _columns_of_part
from sdk.event_batches import window_request
from sdk.event_checks import check_columns
from sdk.producer_config import ProducerConfig
from sdk.producer_connect import connect_and_start
from sdk.producer_futures import BatchFuture, EventFuture, WindowResult
from sdk.security import ClientSecurity
from sdk.sender import (
    BatchResult,
    ProducedEvent,
    ProducerBatch,
    Sender,
    check_producer_id,
    now_ms,
)

UPSERT = pb.UPSERT
DELETE = pb.DELETE


class Producer:
    """Async producer of one topic. Make one with `await Producer.create(...)`."""

    def __init__(self, channel: grpc.aio.Channel, stub: pb_grpc.KeybusAsyncStub, topic: str,
                 partitions: int, config: ProducerConfig, threaded: bool = False,
                 producer_id: int | None = None, leader: LeaderChannel | None = None,
                 broker: str = "", security: ClientSecurity | None = None) -> None:
        self.topic = topic
        self.partitions = partitions
        self.config = config
        self._channel = channel
        self._leader = leader  # several brokers: the channel follows the topic's leader
        self._broker, self._security = broker, security  # to open a new channel (rule 6)
        self._loop = asyncio.get_running_loop()
        # Threaded (the SyncProducer's face): other threads append under the
        # lock, so batch tokens are concurrent futures and every accumulator
        # touch on the loop takes the lock too (once per batch, not per event).
        new_token: Callable[[], Any] = (
            concurrent.futures.Future if threaded else self._loop.create_future)
        self._acc: Accumulator[Any] = config.accumulator(partitions, new_token)
        lock = threading.Lock()
        self._lock: threading.Lock | contextlib.nullcontext[None] = (
            lock if threaded else contextlib.nullcontext())
        self._room_changed = threading.Condition(lock) if threaded else None
        self._sender = Sender(
            stub, topic, partitions, in_flight_max=config.in_flight_max,
            delivery_timeout_ms=config.delivery_timeout_ms, idempotent=config.idempotent,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            request_timeout_ms=config.request_timeout_ms, on_done=self._batch_done,
            producer_id=producer_id, relocate=leader.connect if leader is not None else None,
            channel=self._current_channel, reauthenticate=self._renewed_stub,
            broker=self._address)
        # When batches leave: Nagle's rule (at once to an idle partition, else after
        # the answer or the linger), see batch_flow.py.
        self._flow = BatchFlow(self._acc, self._lock, self._sender, topic,
                               config.delivery_timeout_ms, config.nagle_window)
        self._room = asyncio.Event()  # buffer room was given back
        self._closed = False

    def _address(self) -> str:
        """The broker the sender talks to now (with several brokers, the leader's)."""
        return self._leader.address if self._leader is not None else self._broker

    def _current_channel(self) -> grpc.aio.Channel | None:
        """The channel the sender's stub is on (with several brokers, the leader's)."""
        return self._leader.channel if self._leader is not None else self._channel

    async def _renewed_stub(self) -> pb_grpc.KeybusAsyncStub | None:
        """A stub on a new channel when a rotated client certificate is on disk
        (sdk.channel.renews_channel); None: keep the stub."""
        if self._leader is not None:
            return await self._leader.connect() if await self._leader.renew(time.time()) \
                else None
        renewed = await renew_channel(self._channel, self._broker, self._security, time.time())
        if renewed is not None:
            self._channel = renewed
        return stub_of(renewed) if renewed is not None else None

    @classmethod
    async def create(cls, broker: str = "localhost:6650", topic: str = "", *,
                     config: ProducerConfig | None = None, threaded: bool = False,
                     producer_id: int | None = None, security: ClientSecurity | None = None,
                     **options: Any) -> Producer:
        """Connect, look the topic up, get a producer id and start sending.

        Args:
            broker: "host:port" (port defaults to 6650), or several brokers
                "h1:6650,h2:6650,h3:6650": the producer finds the topic's
                leader and follows it across failovers (sdk/cluster.py).
            topic: an existing topic.
            config: settings; or pass ProducerConfig fields as keywords
                (linger_ms=5, batch_events_max=1000, batch_bytes_max=1<<20,
                buffer_events_max=100_000, in_flight_max=16, idempotent=True,
                delivery_timeout_ms=120_000, ...).
            threaded: for SyncProducer only (events come from other threads
                through send_threadsafe).
            producer_id: a stable id the caller chooses instead of asking
                InitProducer (default None: ask). It must have the high bit
                set (2^63 <= id < 2^64) and be used by one producer at a
                time; sequences start at 0 on every partition, so a producer
                made again with the same id re-sends the same (id, sequence)
                pairs and the broker answers those it stored as duplicates
                (like Kafka's transactional.id, without transactions); one
                sending other events under an (id, sequence) already stored
                gets SequenceError (kind "conflict": "another producer is
                using this producer id") for them, never a false
                acknowledgement. If a
                delivery timeout or the broker forgetting the id forces a new
                id, the producer takes one from InitProducer (see
                `producer_id` property). Needs idempotent=True.
            security: TLS and credentials (sdk.security.ClientSecurity); None =
                the ambient default, else plain text.
        Returns:
            A started Producer.
        Raises:
            ValueError: a bad address or setting, or a producer_id without
                the high bit (or with idempotent=False).
            TopicNotFound, Unavailable, KeybusError: the broker's answer.
        """
        if config is not None and options:
            raise ValueError(f"pass either config or settings as keywords, not both: "
                             f"{sorted(options)}")
        config = config or ProducerConfig.of(options, also=("config", "producer_id", "security"))
        if producer_id is not None:
            check_producer_id(producer_id)
            if not config.idempotent:
                raise ValueError("producer_id needs idempotent=True: without sequences a "
                                 "chosen id deduplicates nothing")

        async def started(channel: grpc.aio.Channel, stub: pb_grpc.KeybusAsyncStub,
                          partitions: int, leader: LeaderChannel | None) -> Producer:
            producer = cls(channel, stub, topic, partitions, config, threaded, producer_id,
                           leader, broker, security)
            await producer._sender.start()
            return producer
        producer = await connect_and_start(broker, topic, config, security, started)
        producer._flow.start()
        return producer

    @property
    def producer_id(self) -> int:
        """The producer id in use (0 when not idempotent); it changes only when
        a delivery timeout or an unknown-id answer forces a new one."""
        return self._sender.queue.producer_id

    async def send(self, key: int | str, value: bytes, *, ordering_key: str | int | None = None,
                   partition: int | None = None, source: str = "", opcode: int = UPSERT,
                   schema: str = "", headers: Mapping[str, bytes] | None = None,
                   event_time_ms: int = 0) -> EventFuture:
        """Buffer one event; return once it is buffered (waits only when full).

        Args:
            key: primary key, an int64 or a non-empty str.
            value: bytes (str is UTF-8 encoded).
            ordering_key: what Key_Shared hashes; default the key.
            partition: explicit partition; default slot % partitions.
            source, opcode (UPSERT/DELETE), schema, headers, event_time_ms:
                optional event fields (defaults "", UPSERT, "", none, 0).
        Returns:
            An EventFuture; await it for the ProducedEvent.
        Raises:
            ValueError: naming the argument that is not allowed.
            BufferFull: no room within max_block_ms.
            ProducerClosed: after close().
        """
        if self._closed:
            raise errors.ProducerClosed("send() after close()")
        acc = self._acc
        batch = acc.add(key, value, ordering_key, partition, source, opcode, schema, headers,
                        event_time_ms, int(_monotonic() * 1000))
        if batch is None:
            return await self._send_when_room(lambda: acc.add(
                key, value, ordering_key, partition, source, opcode, schema, headers,
                event_time_ms, now_ms()))
        future = EventFuture(batch.token, len(batch.keys) - 1)
        if acc.wake:  # a batch opened or filled: look at the end of this loop turn
            acc.wake = False
            self._flow.schedule()
            if acc.has_sealed:
                await asyncio.sleep(0)  # a batch is full: let the sender write it now
        return future

    def send_nowait(self, key: int | str, value: bytes, *,
                    ordering_key: str | int | None = None, partition: int | None = None,
                    source: str = "", opcode: int = UPSERT, schema: str = "",
                    headers: Mapping[str, bytes] | None = None,
                    event_time_ms: int = 0) -> EventFuture:
        """As `send`, without waiting: raises BufferFull when the buffer is full."""
        if self._closed:
            raise errors.ProducerClosed("send_nowait() after close()")
        acc = self._acc
        batch = acc.add(key, value, ordering_key, partition, source, opcode, schema, headers,
                        event_time_ms, now_ms())
        if batch is None:
            self._flow.drain(force=True)
            raise errors.BufferFull(f"the producer buffer holds buffer_events_max="
                                    f"{self.config.buffer_events_max} events")
        if acc.wake:
            acc.wake = False
            self._flow.schedule()
        return EventFuture(batch.token, len(batch.keys) - 1)

    async def _send_when_room(
            self, add: Callable[[], OpenBatch[asyncio.Future[BatchResult]] | None]) -> EventFuture:
        """The buffer is full: wait for room (up to max_block_ms), then add."""
        deadline_ms = now_ms() + self.config.max_block_ms
        while True:
            await self._wait_room(deadline_ms)
            batch = add()
            if batch is not None:
                self._acc.wake = False
                self._flow.schedule()
                return EventFuture(batch.token, len(batch.keys) - 1)

    async def _wait_room(self, deadline_ms: int) -> None:
        """Wait for buffer room, sending what is buffered meanwhile."""
        self._flow.drain(force=True)
        self._room.clear()
        remaining_s = (deadline_ms - now_ms()) / 1000
        try:
            async with asyncio.timeout(max(remaining_s, 0)):
                await self._room.wait()
        except TimeoutError:
            raise errors.BufferFull(
                f"no buffer room within max_block_ms={self.config.max_block_ms}: "
                f"buffer_events_max={self.config.buffer_events_max} events are unanswered"
            ) from None
        if self._closed:
            raise errors.ProducerClosed("the producer closed while send() waited for room")

    async def send_batch(self, keys: Sequence[int | str], values: Sequence[bytes], *,
                         partition: int | None = None,
                         ordering_keys: Sequence[str | int] | None = None, source: str = "",
                         opcode: int = UPSERT, schema: str = "",
                         headers: Mapping[str, bytes] | None = None,
                         event_time_ms: int = 0, sources: Sequence[str] | None = None,
                         opcodes: Sequence[int] | None = None,
                         schemas: Sequence[str] | None = None,
                         headers_per_event: Sequence[Mapping[str, bytes] | None] | None = None,
                         event_times_ms: Sequence[int] | None = None) -> BatchFuture:
        """Send many events from columns: the bulk path, no per-event objects.

        Events are split by partition (explicit, else slot % partitions) and
        into requests of at most batch_events_max / batch_bytes_max, in input
        order (the same columns always give the same requests). source,
        opcode, schema, headers and event_time_ms apply to every event; the
        plural columns give one value per event instead (pass one or the
        other for a field).

        Args:
            sources, opcodes, schemas, headers_per_event, event_times_ms:
                optional per-event columns, one entry per key (defaults None:
                the single value, or the field's default, for every event).
        Returns:
            A BatchFuture; await it for the ProducedEvents in input order, or
            use `wait_results()` for per-request results (duplicates included).
        Raises:
            ValueError: lengths differ, a field given both ways, or naming the
                first bad key/value/entry.
            BufferFull, ProducerClosed: as `send`.
        """
        if self._closed:
            raise errors.ProducerClosed("send_batch() after close()")
        keys, values, ordering = check_columns(keys, values, ordering_keys)
        if partition is not None and not 0 <= partition < self.partitions:
            raise ValueError(f"partition {partition} is invalid: the topic has partitions "
                             f"0..{self.partitions - 1}")
        extras = {name: [v] for name, v in
                  extras_of(None, source, opcode, schema, headers, event_time_ms).items()}
        per_event = event_columns(len(keys), sources, opcodes, schemas, headers_per_event,
                                  event_times_ms)
        both = sorted(set(extras) & set(per_event))
        if both:
            raise ValueError(f"{both} given both as one value and per event; pass one")
        slots = slots_of([o or k for o, k in zip(ordering, keys, strict=True)] if ordering
                         else keys)
        parts = split_columns(keys, values, slots, ordering, self.partitions, partition)
        pieces: list[tuple[asyncio.Future[BatchResult], list[int]]] = []
        for part in parts:
            self._flow.drain(partition=part.partition)
            columns = _columns_of_part(per_event, part.indexes, len(keys))
            sizes = [len(v) + EVENT_OVERHEAD_BYTES for v in part.values]
            for start, stop in chunk_bounds(sizes, self.config.batch_events_max,
                                            self.config.batch_bytes_max):
                await self._reserve(stop - start)
                chunk = dict(extras)
                chunk.update((name, column[start:stop]) for name, column in columns.items())
                token = self._submit_columns(part, start, stop, chunk)
                pieces.append((token, part.indexes[start:stop]))
        return BatchFuture(pieces, len(keys))

    async def _reserve(self, n: int) -> None:
        deadline_ms = now_ms() + self.config.max_block_ms
        while True:
            with self._lock:
                if self._acc.reserve(n):
                    return
            await self._wait_room(deadline_ms)

    def _submit_columns(self, part: Any, start: int, stop: int,
                        extras: dict[str, list[Any]]) -> asyncio.Future[BatchResult]:
        request = pb.ProduceRequest(topic=self.topic, partition=part.partition)
        columns = dict(extras)
        if part.ordering_keys:
            columns["ordering_keys"] = part.ordering_keys[start:stop]
        fill_batch(request.batch, part.keys[start:stop], part.values[start:stop],
                   part.slots[start:stop], columns)
        token: asyncio.Future[BatchResult] = self._loop.create_future()
        deadline_ms = now_ms() + self.config.delivery_timeout_ms
        self._sender.submit(ProducerBatch(request, stop - start, token, deadline_ms,
                                          stop - start))
        return token

    async def send_window(self, events: Sequence[WindowEvent | Mapping[str, Any]], *,
                          partition: int, scn: int | None = None) -> WindowResult:
        """Send one consistency window: one request, appended atomically, one SCN.

        Args:
            events: WindowEvent objects or dicts of their fields (key, value,
                ordering_key, source, opcode, schema, headers, event_time_ms).
            partition: the window's partition (a window is never split).
            scn: the window's SCN, above the partition's last one; None lets
                the broker assign it.
        Returns:
            WindowResult with the offsets and SCN the broker gave it.
        Raises:
            ValueError: empty, over window_events_max / window_bytes_max, or a
                bad event field (named) or partition or scn.
            ScnNotIncreasing: the supplied SCN is not above the last one.
            KeybusError: other broker refusals; DeliveryTimeout.
        """
        if self._closed:
            raise errors.ProducerClosed("send_window() after close()")
        request = window_request(self.topic, self.partitions, events, partition, scn,
                                 self.config.window_events_max, self.config.window_bytes_max)
        self._flow.drain(partition=partition)
        token: asyncio.Future[BatchResult] = self._loop.create_future()
        deadline_ms = now_ms() + self.config.delivery_timeout_ms
        self._sender.submit(ProducerBatch(request, request.batch.count, token, deadline_ms, 0))
        result = await asyncio.shield(token)
        return WindowResult(self.topic, partition, result.base_offset, result.count,
                            result.scn_first, result.publish_time_ms, result.duplicate)

    @property
    def unanswered_events(self) -> int:
        """Events sent (buffered or on the wire) that the broker has not answered yet."""
        return self._acc.buffered_events

    async def flush(self) -> None:
        """Send everything buffered and wait until the broker answered it all
        (or it failed). Errors stay on the events' futures."""
        self._flow.drain(force=True)
        await self._sender.flush()

    async def close(self, timeout_ms: int | None = None) -> None:
        """Flush (up to timeout_ms, default delivery_timeout_ms) and disconnect.

        Events still unanswered then fail with ProducerClosed. Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        self._flow.drain(force=True)
        await self._sender.close(timeout_ms)
        await self._flow.stop()
        self._room.set()  # wake senders waiting for room: they see the close
        if self._room_changed is not None:
            with self._room_changed:
                self._room_changed.notify_all()
        await (self._leader.close() if self._leader is not None else self._channel.close())

    def send_threadsafe(self, key: int | str, value: bytes, ordering_key: str | int | None,
                        partition: int | None, source: str, opcode: int, schema: str,
                        headers: Mapping[str, bytes] | None, event_time_ms: int,
                        max_block_ms: int) -> tuple[concurrent.futures.Future[BatchResult], int]:
        """Buffer one event from a thread other than the loop's (threaded mode).

        Returns:
            (the batch's concurrent future, the event's index in the batch).
        Raises:
            As `send`; BufferFull after max_block_ms without room.
        """
        assert self._room_changed is not None, "send_threadsafe needs threaded=True"
        deadline_s = time.monotonic() + max_block_ms / 1000
        with self._room_changed:
            while True:
                if self._closed:
                    raise errors.ProducerClosed("send() after close()")
                batch = self._acc.add(key, value, ordering_key, partition, source, opcode,
                                      schema, headers, event_time_ms, now_ms())
                if batch is not None:
                    break
                self._flow.handoff.extend(self._acc.drain(now_ms(), force=True))
                self._flow.wake_threadsafe()
                if not self._room_changed.wait(deadline_s - time.monotonic()):
                    raise errors.BufferFull(f"no buffer room within max_block_ms={max_block_ms}")
            index = len(batch.keys) - 1
            wake = self._acc.wake
            self._acc.wake = False
        if wake:
            self._flow.wake_threadsafe()
        return batch.token, index

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    def _batch_done(self, batch: ProducerBatch) -> None:
        """Runs on the loop when the Sender finishes a batch: give room back, and
        send what gathered meanwhile if its partition is now idle (Nagle)."""
        if self._room_changed is not None or self._acc.waiting:  # threaded: always look
            self._flow.schedule()
        if not batch.buffered:
            return
        if self._room_changed is None:
            self._acc.release(batch.buffered)
        else:
            with self._room_changed:
                self._acc.release(batch.buffered)
                self._room_changed.notify_all()
        self._room.set()


__all__ = ["DELETE", "UPSERT", "BatchFuture", "BatchResult", "EventFuture", "ProducedEvent",
           "Producer", "ProducerConfig", "WindowEvent", "WindowResult"]
