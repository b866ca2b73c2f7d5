"""Blocking faces of the SDK for code without an event loop.

Each object runs an asyncio loop in a daemon thread and calls the async
class there. `SyncProducer.send` does not hop threads per event: it appends
to the producer's accumulator under a lock in the caller's thread, and only
whole batches cross to the loop (see Producer.send_threadsafe).
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from sdk.accumulator import WindowEvent
from sdk.admin import Admin
from sdk.bootstrap import BootstrapPosition
from sdk.core.columns import Event
from sdk.core.pb import keybus_pb2 as pb
from sdk.errors import ProducerClosed
from sdk.loop_thread import LoopThread, check_timeout_s
from sdk.options import check_settings, keyword_settings
from sdk.producer import (
    UPSERT,
    BatchFuture,
    Producer,
    ProducerConfig,
    WindowResult,
)
from sdk.reader import ReadBatch, Reader, Start
from sdk.sender import BatchResult, ProducedEvent
from sdk.topic_reader import TopicReader

log = logging.getLogger("keybus")

_QUIET_FLUSH_S = 1.0  # at exit, how long a flush goes on before a warning says why it waits


class SyncEventFuture:
    """The fate of one event sent by SyncProducer.send: batch future + index."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: concurrent.futures.Future[BatchResult], index: int) -> None:
        self._batch = batch
        self._index = index

    def result(self, timeout_s: float | None = None) -> ProducedEvent:
        """Wait for the stored event.

        Raises:
            TimeoutError: not answered within timeout_s (it stays pending).
            ValueError: timeout_s is not None or a number >= 0.
            KeybusError: the batch failed (DeliveryTimeout, InvalidArgument, ...).
        """
        check_timeout_s(timeout_s)
        try:
            return self._batch.result(timeout_s).event(self._index)
        except TimeoutError:
            if self._batch.done():
                raise
            raise TimeoutError(f"the event was not answered within timeout_s={timeout_s}; "
                               "it stays pending (the producer retries up to "
                               "delivery_timeout_ms)") from None

    def done(self) -> bool:
        return self._batch.done()

    def exception(self, timeout_s: float | None = None) -> BaseException | None:
        return self._batch.exception(timeout_s)

    def add_done_callback(self, fn: Any) -> None:
        """Call fn(self) once answered (on the SDK's loop thread: do not block there)."""
        self._batch.add_done_callback(lambda _: fn(self))


class SyncProducer:
    """Blocking producer of one topic; the settings are ProducerConfig's.

    `SyncProducer.create(...)` (as `Producer.create`) and `SyncProducer(...)`
    are the same call. Threads may share one: `send` appends under a lock.
    Left open at interpreter exit, it is flushed then (sdk/loop_thread.py).

    Args:
        broker: "host:port". topic: an existing topic.
        config / options: as Producer.create.
    Raises:
        TopicNotFound, Unavailable, ValueError: as Producer.create.
    """

    def __init__(self, broker: str = "localhost:6650", topic: str = "", *,
                 config: ProducerConfig | None = None, **options: Any) -> None:
        self._thread = LoopThread(f"keybus-producer-{topic}",
                                  f"SyncProducer of topic {topic!r}", ProducerClosed)
        try:
            self._producer = self._thread.run(
                Producer.create(broker, topic, config=config, threaded=True, **options))
        except BaseException:
            self._thread.stop()
            raise
        self.topic = topic
        self.partitions = self._producer.partitions
        self.config = self._producer.config
        self._thread.at_exit = self._flush_at_exit

    @classmethod
    def create(cls, broker: str = "localhost:6650", topic: str = "", *,
               config: ProducerConfig | None = None, **options: Any) -> SyncProducer:
        """A connected producer (arguments as Producer.create): the blocking
        twin of `await Producer.create(...)`."""
        return cls(broker, topic, config=config, **options)

    def send(self, key: int | str, value: bytes, *, ordering_key: str | int | None = None,
             partition: int | None = None, source: str = "", opcode: int = UPSERT,
             schema: str = "", headers: Mapping[str, bytes] | None = None,
             event_time_ms: int = 0) -> SyncEventFuture:
        """Buffer one event (arguments as Producer.send); blocks only when full.

        Raises:
            ValueError, BufferFull (after max_block_ms), ProducerClosed.
            RuntimeError: in a process forked after the producer was made.
        """
        if self._thread.forked:
            self._thread.check_usable("send")
        token, index = self._producer.send_threadsafe(
            key, value, ordering_key, partition, source, opcode, schema, headers,
            event_time_ms, self.config.max_block_ms)
        return SyncEventFuture(token, index)

    def send_batch(self, keys: Sequence[int | str], values: Sequence[bytes],
                   **options: Any) -> concurrent.futures.Future[list[ProducedEvent]]:
        """The columnar bulk path (arguments as Producer.send_batch).

        Returns once buffered; the future gives the ProducedEvents in input order.
        """
        batch_future = self._thread.run(self._producer.send_batch(keys, values, **options))
        return self._thread.submit(_await_batch(batch_future))

    def send_window(self, events: Sequence[WindowEvent | Mapping[str, Any]], *,
                    partition: int, scn: int | None = None) -> WindowResult:
        """Send one consistency window and wait for it (as Producer.send_window)."""
        return self._thread.run(self._producer.send_window(events, partition=partition,
                                                           scn=scn))

    def flush(self, timeout_s: float | None = None) -> None:
        """Send everything buffered and wait for the broker's answers.

        Raises:
            TimeoutError: not all answered within timeout_s (they stay buffered).
            ValueError: timeout_s is not None or a number >= 0.
            ProducerClosed: after close().
        """
        self._thread.run(self._producer.flush(), timeout_s)

    def close(self, timeout_ms: int | None = None) -> None:
        """Flush (up to timeout_ms, default delivery_timeout_ms), disconnect,
        stop the loop thread. Idempotent.

        A producer still open when the interpreter exits is flushed then, with
        a warning if events were still unanswered (the exit waits for them, up
        to delivery_timeout_ms).
        """
        if self._thread.loop.is_closed() or self._thread.forked:
            return
        try:
            self._thread.run(self._producer.close(timeout_ms))
        finally:
            self._thread.stop()

    def _flush_at_exit(self) -> None:
        """The interpreter exits with this producer open: send what it holds.
        A flush, not a close: a daemon thread still sending must not get
        ProducerClosed (and print a traceback) as the program ends. Quiet
        when the broker answers within _QUIET_FLUSH_S, as it does when up."""
        try:
            self.flush(_QUIET_FLUSH_S)
            return
        except TimeoutError:
            pass
        log.warning("%s was not closed; sending its %d unanswered event(s) before the "
                    "interpreter exits (up to delivery_timeout_ms=%d; close() the "
                    "producer to choose)", self._thread.owner,
                    self._producer.unanswered_events, self.config.delivery_timeout_ms)
        self.flush()

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


async def _await_batch(batch_future: BatchFuture) -> list[ProducedEvent]:
    return await batch_future


class _SyncBatches:
    """A blocking iterator of ReadBatch over an async reader on a loop thread."""

    def __init__(self, reader: Reader | TopicReader, thread_name: str, owner: str) -> None:
        self._reader = reader
        self._thread = LoopThread(thread_name, owner)
        # The batch a Ctrl-C stopped waiting for: the next call takes it (a
        # reader's read cannot be cancelled halfway without losing its place).
        self._pending: concurrent.futures.Future[ReadBatch] | None = None

    def _open(self) -> None:
        """The reader's open() (a "latest" start fixed, as `await reader.open()`), on
        the loop thread; a failure stops the thread and is raised to the caller."""
        try:
            self._thread.run(self._reader.open())
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> Iterator[ReadBatch]:
        return self

    def __next__(self) -> ReadBatch:
        if self._thread.loop.is_closed():
            raise StopIteration
        if self._pending is None:
            self._pending = self._thread.submit(_next_batch(self._reader))
        try:
            batch = self._pending.result()
        except KeyboardInterrupt:
            raise  # the read goes on; the next call takes its batch
        except StopAsyncIteration:
            self._pending = None
            raise StopIteration from None
        except BaseException:
            self._pending = None
            raise
        self._pending = None
        return batch

    def close(self) -> None:
        """Cancel the stream(s), close the channel, stop the loop thread. Idempotent."""
        if self._thread.loop.is_closed() or self._thread.forked:
            return
        try:
            self._thread.run(self._reader.close())
        finally:
            self._thread.stop()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class SyncReader(_SyncBatches):
    """Blocking iterator of ReadBatch over one partition (arguments as Reader).

    Made as `async with Reader(...)` opens: a "latest" start is fixed before the
    constructor returns (Reader.open), so an event stored after it is read.

    Raises:
        As Reader.open (Unavailable, TopicNotFound, ...) for a "latest" start.
    """

    def __init__(self, broker: str = "localhost:6650", topic: str = "", partition: int = 0,
                 **options: Any) -> None:
        check_settings("reader", options, keyword_settings(Reader, ("broker", "topic",
                                                                    "partition")))
        self._one = Reader(broker, topic, partition, **options)
        super().__init__(self._one, f"keybus-reader-{topic}-{partition}",
                         f"SyncReader of {topic}/{partition}")
        self._open()

    @property
    def next_offset(self) -> int | None:
        return self._one.next_offset

    @property
    def end_offset(self) -> int | None:
        return self._one.end_offset

    @property
    def position(self) -> BootstrapPosition | None:
        """A bootstrap's position after the last batch handed out (Reader.position)."""
        return self._one.position

    def __enter__(self) -> SyncReader:
        return self


class SyncTopicReader(_SyncBatches):
    """Blocking iterator of ReadBatch over every partition of a topic, merged
    (arguments as TopicReader).

    The constructor opens it (TopicReader.open): the partitions are found and a
    "latest" start is fixed on every one before it returns.

    Raises:
        As TopicReader.open: TopicNotFound, Unavailable (a broker never reached,
        within connect_timeout_ms), KeybusError.
    """

    def __init__(self, broker: str = "localhost:6650", topic: str = "",
                 partitions: Sequence[int] | None = None, *, start: Start = "earliest",
                 **options: Any) -> None:
        self._topic_reader = TopicReader(broker, topic, partitions, start=start, **options)
        super().__init__(self._topic_reader, f"keybus-topic-reader-{topic}",
                         f"SyncTopicReader of topic {topic!r}")
        self._open()

    @property
    def next_offsets(self) -> dict[int, int | None]:
        return self._topic_reader.next_offsets

    def __enter__(self) -> SyncTopicReader:
        return self


async def _next_batch(reader: Reader | TopicReader) -> ReadBatch:
    return await reader.__anext__()


def read_all(broker: str = "localhost:6650", topic: str = "", partition: int = 0,
             **options: Any) -> list[Event]:
    """Blocking sdk.reader.read_all: every event to the end of the log."""
    from sdk.reader import read_all as read_all_async

    thread = LoopThread(f"keybus-read-all-{topic}")
    try:
        return thread.run(read_all_async(broker, topic, partition, **options))
    finally:
        thread.stop()


class SyncAdmin:
    """Blocking topic and subscription administration (methods and arguments as Admin)."""

    def __init__(self, broker: str = "localhost:6650", **options: Any) -> None:
        check_settings("admin", options, keyword_settings(Admin, ("broker",)))
        self._admin = Admin(broker, **options)
        self._thread = LoopThread("keybus-admin", f"SyncAdmin of {broker}")

    def create_topic(self, name: str, partitions: int = 1, retention_ms: int = 0,
                     retention_bytes: int = 0, **options: Any) -> pb.TopicInfo:
        return self._thread.run(self._admin.create_topic(name, partitions, retention_ms,
                                                         retention_bytes, **options))

    def list_topics(self) -> list[pb.TopicInfo]:
        return self._thread.run(self._admin.list_topics())

    def describe_topic(self, name: str) -> pb.TopicInfo:
        return self._thread.run(self._admin.describe_topic(name))

    def delete_topic(self, name: str) -> None:
        self._thread.run(self._admin.delete_topic(name))

    def list_subscriptions(self, topic: str) -> list[pb.SubscriptionInfo]:
        return self._thread.run(self._admin.list_subscriptions(topic))

    def describe_subscription(self, topic: str, subscription: str) -> pb.SubscriptionInfo:
        return self._thread.run(self._admin.describe_subscription(topic, subscription))

    def seek(self, topic: str, subscription: str, position: Start,
             partitions: Sequence[int] = ()) -> pb.SubscriptionInfo:
        return self._thread.run(self._admin.seek(topic, subscription, position, partitions))

    def delete_subscription(self, topic: str, subscription: str, force: bool = False) -> None:
        self._thread.run(self._admin.delete_subscription(topic, subscription, force))

    def close(self) -> None:
        """Close the channel and stop the loop thread. Idempotent."""
        if self._thread.loop.is_closed() or self._thread.forked:
            return
        try:
            self._thread.run(self._admin.close())
        finally:
            self._thread.stop()

    def __enter__(self) -> SyncAdmin:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
