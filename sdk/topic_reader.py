"""TopicReader: read every partition of a topic (or some), merged as batches arrive.

What Kafka's console consumer and Pulsar's reader on a partitioned topic do:
one `Reader` per partition on one shared channel, each feeding a bounded
queue, so a user who produced a key to whichever partition it hashes to
reads it back without knowing which. Order holds within a partition (and so
per key); across partitions batches interleave as they arrive. Every batch
carries its partition (`batch.partition`).

Runs on one asyncio event loop; `SyncTopicReader` (sync.py) is the blocking face.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import grpc.aio

from sdk.admin import Admin
from sdk.channel import open_channel
from sdk.cluster import FIND_TIMEOUT_MS, is_cluster, topic_broker
from sdk.options import check_settings, keyword_settings
from sdk.reader import ReadBatch, Reader, Start
from sdk.reconnect import ConnectionCallback, log_connection_change

_END = object()  # a partition's reader reached its end


class TopicReader:
    """Async iterator of ReadBatch over several partitions of one topic.

    Args:
        broker: "host:port" (ignored when `channel` is given), or several
            ("h1:6650,h2:6650"): each partition is read from the topic's
            leader, followed across failovers.
        topic: an existing topic.
        partitions: which partitions (default None: all of them).
        start: "earliest" (default), "latest" or {"scn": n}, applied to each
            partition; an offset (int) names a position in one partition, so
            it needs exactly one partition in `partitions`. "latest" is each
            partition's end when `open()` (or `async with`) returns.
        on_connection_change: called once (False, message) when the broker is
            lost and once (True, message) when every partition's stream is
            back; may be a coroutine function.
        options: the other Reader arguments (hash_ranges, key_filter, follow,
            events_max, bytes_max, connect_timeout_ms, retry_timeout_ms,
            retry_backoff_ms, retry_backoff_max_ms).
    Raises:
        ValueError (here): an offset start with more than one partition.
        TopicNotFound, InvalidArgument (a partition out of range),
        OffsetOutOfRange, Unavailable, KeybusError: as Reader, from open()
        (or `async with`, or the first iteration) and from iterating.
    """

    def __init__(self, broker: str = "localhost:6650", topic: str = "",
                 partitions: Sequence[int] | None = None, *, start: Start = "earliest",
                 on_connection_change: ConnectionCallback | None = None,
                 channel: grpc.aio.Channel | None = None, **options: Any) -> None:
        if not topic:
            raise ValueError("topic is empty; give the name of an existing topic")
        if "partition" in options:
            raise ValueError("TopicReader takes partitions=[...]; Reader reads one partition")
        check_settings("topic reader", options, [
            *keyword_settings(TopicReader, ("broker", "topic", "options")),
            *keyword_settings(Reader, ("broker", "topic", "partition", "start",
                                       "on_connection_change", "channel"))])
        if type(start) is int and (partitions is None or len(partitions) != 1):
            raise ValueError(f"start={start} is an offset, a position in one partition: give "
                             "one partition (partitions=[p]) or start 'earliest', 'latest' "
                             "or {'scn': n}")
        self.broker = broker
        self.topic = topic
        self.partitions: list[int] = list(partitions) if partitions is not None else []
        self._all = partitions is None
        self._start = start
        self._options = options
        self._on_connection_change = on_connection_change or log_connection_change
        self._channel = channel
        self._owns_channel = channel is None
        self._readers: dict[int, Reader] = {}
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._running = 0
        self._lost: set[int] = set()
        self._opened = False
        self._closed = False

    async def open(self) -> list[int]:
        """Find the partitions (when all), fix each one's start and start reading;
        returns the partitions. `async with` and the first iteration call it.

        A "latest" start is each partition's log end when open runs: open returns
        once every partition's reader has its position from the broker (Reader.open),
        so an event stored after open returns is read, from whichever partition.

        Raises:
            As Reader.open (Unavailable within connect_timeout_ms for a broker
            never reached, TopicNotFound, ...); the reader is closed then.
        """
        if self._opened:
            return self.partitions
        self._opened = True
        if self._channel is None and not is_cluster(self.broker):
            self._channel = open_channel(self.broker)  # several brokers: a channel per reader
        if self._all:
            timeout_ms = self._options.get("connect_timeout_ms", 5_000) or FIND_TIMEOUT_MS
            address = await topic_broker(self.broker, self.topic, timeout_ms)
            async with Admin(address, channel=self._channel) as admin:
                info = await admin.describe_topic(self.topic)
            self.partitions = [p.partition for p in info.partitions]
        self._queue = asyncio.Queue(max(2, 2 * len(self.partitions)))
        for partition in self.partitions:
            self._readers[partition] = Reader(
                self.broker, self.topic, partition, start=self._start, channel=self._channel,
                on_connection_change=self._reporter(partition), **self._options)
        await self._open_readers()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._pump(r), name=f"keybus-read-{self.topic}/{p}")
                       for p, r in self._readers.items()]
        self._running = len(self._tasks)
        return self.partitions

    async def _open_readers(self) -> None:
        """Every partition's Reader.open at once; the first failure stops the others
        and closes this reader (each retries within connect_timeout_ms, not forever)."""
        loop = asyncio.get_running_loop()
        opening = [loop.create_task(r.open(), name=f"keybus-open-{self.topic}/{p}")
                   for p, r in self._readers.items()]
        try:
            await asyncio.gather(*opening)
        except BaseException:
            for task in opening:
                task.cancel()
            await asyncio.gather(*opening, return_exceptions=True)
            await self.close()
            raise

    @property
    def next_offsets(self) -> dict[int, int | None]:
        """partition -> the offset to resume from (None until its first response)."""
        return {p: r.next_offset for p, r in self._readers.items()}

    @property
    def end_offsets(self) -> dict[int, int | None]:
        """partition -> the log end at its last response (lag)."""
        return {p: r.end_offset for p, r in self._readers.items()}

    async def _pump(self, reader: Reader) -> None:
        try:
            async for batch in reader:
                await self._queue.put(batch)
            await self._queue.put(_END)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # handed to the iterating caller, who re-raises it
            await self._queue.put(e)

    def _reporter(self, partition: int) -> ConnectionCallback:
        """One report for the topic, not one per partition stream."""
        async def report(connected: bool, message: str) -> None:
            was_lost = bool(self._lost)
            if connected:
                self._lost.discard(partition)
            else:
                self._lost.add(partition)
            if was_lost != bool(self._lost):
                result = self._on_connection_change(connected, message)
                if inspect.isawaitable(result):
                    await result
        return report

    def __aiter__(self) -> TopicReader:
        return self

    async def __anext__(self) -> ReadBatch:
        await self.open()
        while self._running and not self._closed:
            item = await self._queue.get()
            if item is _END:
                self._running -= 1
                continue
            if isinstance(item, BaseException):
                await self.close()
                raise item
            assert isinstance(item, ReadBatch)
            return item
        await self.close()
        raise StopAsyncIteration

    async def close(self) -> None:
        """Stop every partition's stream and close the channel it opened. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for reader in self._readers.values():
            await reader.close()
        if self._owns_channel and self._channel is not None:
            await self._channel.close()
        self._channel = None

    async def __aenter__(self) -> TopicReader:
        try:
            await self.open()
        except BaseException:
            await self.close()  # no __aexit__ follows a failed __aenter__
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()
