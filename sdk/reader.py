"""Reader: stream one partition's log from a start position, no subscription.

Yields one ReadBatch per stored record (read_batch.py). A "latest" start is
fixed by `open()`: it waits for the broker's first response, which names the
offset (a user who opens, then produces, reads what they produced). Tracks
the next offset to read, so a broken stream resumes where it left off (retrying_call.py and
reconnect.py: a broker never reached fails within connect_timeout_ms; a lost
one is reported through `on_connection_change` and retried for
retry_timeout_ms). The broker's relay follower and the Spark connector read
through this class; `TopicReader` (topic_reader.py) merges one per partition.
A filtered follow read also hears, now and then, how far it passed records its
filter dropped whole (`passed`, `items()`); iterating yields batches only.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from types import TracebackType
from typing import Any

import grpc
import grpc.aio

from sdk import errors
from sdk.bootstrap import BootstrapPosition, BootstrapStream
from sdk.channel import open_channel, renews_channel, stub_of
from sdk.cluster import FIND_TIMEOUT_MS, LeaderChannel, is_cluster
from sdk.core.columns import Event
from sdk.core.model import HashRange
from sdk.core.pb import keybus_pb2 as pb
from sdk.event_checks import check_sources
from sdk.read_batch import PassedPosition, bootstrap_output
from sdk.read_batch import ReadBatch as ReadBatch  # re-exported: users import it from here

# re-exported: callers import them from here
from sdk.read_options import POSITION_MAX as POSITION_MAX
from sdk.read_options import Start as Start
from sdk.read_options import ToProto
from sdk.read_options import filter_to_proto as filter_to_proto
from sdk.read_options import ranges_to_proto as ranges_to_proto
from sdk.read_options import start_to_proto as start_to_proto
from sdk.reconnect import ConnectionCallback
from sdk.retrying_call import RetryingCall, retry_timeout_default_ms
from sdk.security import ClientSecurity
from sdk.slot_wait import SlotWait, SlotWaitCallback, SlotWaitPolicy

# A start past the log end after a failover (the new leader lacks never-acknowledged events).
_TRUNCATED_CODES = {errors.OUT_OF_RANGE}
_log = logging.getLogger("keybus.reader")


class Reader:
    """Async iterator of ReadBatch over one partition.

    Args:
        broker: "host:port" (ignored when `channel` is given), or several
            ("h1:6650,h2:6650,h3:6650"): read from the topic's leader and
            follow it across failovers.
        topic, partition: what to read.
        start: "earliest" (default), "latest", an offset (int), {"scn": n}
            (the first event whose SCN is >= n), or "bootstrap": the
            partition's compacted view as a snapshot, then the log from the
            snapshot's offset (sdk/bootstrap.py); a BootstrapPosition (from
            `position`) continues a bootstrap. "latest" is the log end when
            `open()` (or `async with`) returns, else at the first iteration.
        hash_ranges: only events whose slot is in these inclusive ranges:
            HashRange objects, (first, last) pairs, or text "0-16383,40000-65535".
        key_filter: a pb.KeyFilter, an object with to_proto(), or CLI text such
            as "mod:10:[0,3]" or "range:5000000:[1,3-6]@orders" (RANGE/MOD).
        follow: after the end of the log, wait for new events (never ends).
        stop_offset: exclusive end offset (None = no end).
        events_max, bytes_max: per response message (0 = broker default).
        connect_timeout_ms: a broker never reached fails the read after this
            long with "cannot reach broker at ..." (default 5000; 0 = retry
            forever).
        retry_timeout_ms: a broker lost mid-read is retried this long, then
            the read fails with Unavailable (default None: 30000 without
            follow, forever with follow; 0 = forever).
        retry_backoff_ms, retry_backoff_max_ms: reconnect backoff (100, 1000).
        on_connection_change: called (False, message) when the broker is lost
            and the reader starts retrying, (True, message) when it is back;
            may be a coroutine function.
        slot_wait_timeout_ms: bootstrap only (else ValueError): a broker whose
            bootstrap slots are all taken (bootstrap_streams_max) is asked again with the
            reconnect backoff for this long, then the read fails with
            ResourceExhausted (default None: as retry_timeout_ms, 30000
            without follow, forever with follow; 0 = until a slot is free).
        on_slot_wait: bootstrap only (else ValueError): called (True, message) when the read
            begins to wait for a bootstrap slot, (False, message) when it got
            one; may be a coroutine function. Not a lost broker:
            on_connection_change is not called. Default: a WARNING on the
            `keybus.bootstrap` logger, then INFO (sdk/slot_wait.py).
        channel: a grpc.aio channel to share (not closed by close()).
        sources: bootstrap only: just these sources, in this order (default all).
        include_tombstones: bootstrap only: the snapshot carries DELETE events
            of deleted keys (default True, for a reader that holds state).
        allow_incomplete_view: bootstrap only: take a snapshot of a view that
            lacks keys (its broker's log starts past offsets it never folded;
            the snapshot's PhaseMarker.keys_missing_below says which) instead
            of the broker's refusal (Unavailable, view_incomplete).
        security: TLS and credentials (sdk.security.ClientSecurity); None =
            the ambient default, else plain text.
        replica: a relay follower's copy: read to the broker's durable log end,
            past the high watermark readers are held to (needs the admin
            permission); `on_high_watermark` is called with the broker's high
            watermark from every response.
        incarnation: the topic's incarnation (TopicInfo.incarnation) the read
            is of, when the caller knows it (a checkpoint's); None (default):
            the one the broker names in its first response. It is sent with
            every open of the stream, so a read reopened after a lost
            connection to a topic deleted and created again meanwhile fails
            with TopicRecreated instead of reading the new topic from the old
            topic's offset (docs/architecture.md, "Clients and a broker that
            is away"). A bootstrap sends it too (so its snapshot, catch-up
            and online log are of one topic, also across reopens; give the
            one saved with a BootstrapPosition to continue it).
    Raises (while iterating):
        TopicNotFound, InvalidArgument, Unavailable, KeybusError.
        TopicRecreated: the topic is another incarnation than the read's (it
            was deleted and created again since the read began, or since the
            incarnation given); not retried.
        OffsetOutOfRange: the start is not stored, or retention removed offsets
            the read reached while it went on (after every batch received
            before them; next_offset is the first one missing).
    """

    def __init__(self, broker: str = "localhost:6650", topic: str = "", partition: int = 0, *,
                 start: Start = "earliest",
                 hash_ranges: str | Iterable[HashRange | tuple[int, int]] | None = None,
                 key_filter: str | pb.KeyFilter | ToProto | None = None, follow: bool = False,
                 stop_offset: int | None = None, events_max: int = 0, bytes_max: int = 0,
                 connect_timeout_ms: int = 5_000, retry_timeout_ms: int | None = None,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1_000,
                 on_connection_change: ConnectionCallback | None = None,
                 slot_wait_timeout_ms: int | None = None,
                 on_slot_wait: SlotWaitCallback | None = None,
                 channel: grpc.aio.Channel | None = None, sources: Iterable[str] | None = None,
                 include_tombstones: bool = True, allow_incomplete_view: bool = False,
                 security: ClientSecurity | None = None, replica: bool = False,
                 incarnation: str | None = None) -> None:
        if not topic:
            raise ValueError("topic is empty; give the name of an existing topic")
        if type(partition) is not int or partition < 0:
            raise ValueError(f"partition {partition!r} is invalid: need an int >= 0")
        if stop_offset is not None and (type(stop_offset) is not int or stop_offset < 1):
            raise ValueError(f"stop_offset {stop_offset!r} is invalid: an exclusive end "
                             "offset >= 1, or None")
        if incarnation is not None and type(incarnation) is not str:
            raise ValueError(f"incarnation {incarnation!r} is invalid: the topic's incarnation "
                             "as DescribeTopic shows it (a str), or None")
        self.broker = broker
        self._security = security
        self.topic = topic
        self.partition = partition
        self.follow = follow
        self.stop_offset = stop_offset
        self._template = pb.ReadRequest(
            topic=topic, partition=partition, hash_ranges=ranges_to_proto(hash_ranges),
            filter=filter_to_proto(key_filter), events_max=events_max, bytes_max=bytes_max,
            follow=follow, stop_offset=stop_offset or 0, replica=replica,
            incarnation=incarnation or "")
        # The topic's incarnation the read is of: given, or named by the broker's first
        # response (None until then, and from a broker that does not name it).
        self.incarnation: str | None = incarnation or None
        self._channel: grpc.aio.Channel | None = channel
        link: dict[str, Any] = {"connect_timeout_ms": connect_timeout_ms, "broker": broker,
                "on_connection_change": on_connection_change,
                "channel": lambda: self._channel, "reauthenticate": self._renew_channel,
                "topic": topic}
        self._bootstrap: BootstrapStream | None = None
        if start == "bootstrap" or isinstance(start, BootstrapPosition):
            self._start = pb.StartPosition()
            self._bootstrap = BootstrapStream(
                self._bootstrap_call, pb.BootstrapRequest(
                    topic=topic, partition=partition, sources=check_sources(sources) or [],
                    filter=self._template.filter, hash_ranges=self._template.hash_ranges,
                    events_max=events_max, bytes_max=bytes_max, follow=follow,
                    include_tombstones=include_tombstones, stop_offset=stop_offset or 0,
                    allow_incomplete_view=allow_incomplete_view,
                    incarnation=incarnation or ""),
                start if isinstance(start, BootstrapPosition) else None, follow,
                retry_timeout_ms, retry_backoff_ms, retry_backoff_max_ms, **link,
                slot_wait=SlotWait(f"{topic}/{partition}", broker, SlotWaitPolicy(
                    _slot_wait_ms(slot_wait_timeout_ms, retry_timeout_ms, follow),
                    retry_backoff_ms, retry_backoff_max_ms)),
                on_slot_wait=on_slot_wait)
        elif sources is not None:
            raise ValueError("sources applies to start='bootstrap' only (a log read has "
                             "every source; filter them from the batches)")
        elif slot_wait_timeout_ms is not None or on_slot_wait is not None:
            name = "on_slot_wait" if slot_wait_timeout_ms is None else "slot_wait_timeout_ms"
            raise ValueError(f"{name} applies to start='bootstrap' only (a log read takes no "
                             "bootstrap slot, so it never waits for one)")
        else:
            self._start = start_to_proto(start, bootstrap_ok=True)
        self._retry_timeout_ms = retry_timeout_ms
        self._backoff_first_ms = retry_backoff_ms
        self._backoff_max_ms = retry_backoff_max_ms
        self._owns_channel = channel is None
        # Several brokers ("h1:6650,h2:6650"): read from the topic's leader, follow it.
        # Finding it takes up to connect_timeout_ms (RetryingCall retries after that).
        self._leader = LeaderChannel(broker, topic, connect_timeout_ms or FIND_TIMEOUT_MS,
                                     security) \
            if channel is None and is_cluster(broker) else None
        self._stream = RetryingCall(self._open_call, follow, retry_timeout_ms, retry_backoff_ms,
                                    retry_backoff_max_ms, **link,
                                    prepare=self._find_leader if self._leader else None)
        self._records: deque[pb.Record] = deque()
        self._response_next = 0
        self._next_offset: int | None = None
        self.end_offset: int | None = None  # log end at the last response (lag)
        # replica reads (a relay follower's copy): called with the upstream's high
        # watermark from every response, also those without records.
        self.on_high_watermark: Callable[[int], None] | None = None
        # A following read: called with the next offset when a response without records
        # comes (the broker's word that the read reached the log end): the read works
        # even when no event comes (an event processor says a partition recovered).
        self.on_tail: Callable[[int], None] | None = None
        # A filtered follow read: how far it passed records its filter dropped whole,
        # the last the broker told (None until then); `items()` yields each once.
        self.passed: PassedPosition | None = None
        self._passed_unyielded = False
        self._done = False
        self._opened = False

    @property
    def next_offset(self) -> int | None:
        """The offset to resume from (None until the first response; a
        bootstrap: None during the snapshot)."""
        if self._bootstrap is not None:
            position = self._bootstrap.consumed
            return None if position is None or position.phase == "snapshot" \
                else position.next_offset
        return self._next_offset

    @property
    def position(self) -> BootstrapPosition | None:
        """A bootstrap's position after the last batch handed out (pass it as
        `start` to continue); None for a log read or before the first batch."""
        return None if self._bootstrap is None else self._bootstrap.consumed

    @property
    def reconnects(self) -> int:
        """How many times the stream was opened again after a failure (resumed)."""
        return (self._bootstrap or self._stream).reconnects

    @property
    def last_failure(self) -> grpc.RpcError | errors.Unavailable | None:
        """The failure behind the last (False, message) report, with its status code
        (a gRPC error, or Unavailable when no leader was found); None before any."""
        return (self._bootstrap or self._stream).last_failure

    def _bootstrap_call(self) -> Any:
        if self._channel is None:
            self._channel = open_channel(self.broker, self._security)
        return stub_of(self._channel).Bootstrap

    async def open(self, first_answer: bool = False) -> Reader:
        """Fix the start position; returns the reader. `async with` calls it.

        "latest" is the log end when the broker opens the read, not when this
        object was made: open opens the stream and waits for its first response
        (a following read gets one at once, carrying next_offset), so every event
        stored after open returns is read, and a reconnect resumes from that
        position, not from a new latest (docs/architecture.md). Pulsar's
        createReader returns so positioned. Every other start names its position
        already: open does nothing, the stream opens at the first iteration,
        unless `first_answer`: then open waits for the first response whatever
        the start, so a start the broker refuses (OffsetOutOfRange: removed, or
        past the log end) fails here rather than at the first batch (the event
        processor so learns of a checkpoint past the end before it calls
        on_partition_initialize). Idempotent.

        Raises:
            As iterating: Unavailable (a broker never reached, within
            connect_timeout_ms), TopicNotFound, InvalidArgument, KeybusError.
        """
        if self._opened:
            return self
        waits = first_answer or self._start.WhichOneof("position") == "latest"
        if self._bootstrap is None and waits and self._next_offset is None and not self._done:
            await self._receive()
        self._opened = True
        return self

    def __aiter__(self) -> Reader:
        return self

    async def __anext__(self) -> ReadBatch:
        if self._bootstrap is not None:
            while isinstance(item := await self._bootstrap_item(), PassedPosition):
                pass  # iterating yields batches only; items() yields positions too
            if item is None:
                raise StopAsyncIteration
            return item
        while not self._records:
            if self._done or self._reached_stop():
                await self.close()
                raise StopAsyncIteration
            await self._receive()
        batch = ReadBatch(self._records.popleft())
        self._advance(self._response_next if not self._records else batch.next_offset)
        return batch

    async def _receive(self) -> None:
        """Wait for the next response and keep what it says: its records, the log
        end, its next offset when it has no records; the end of the read (None)."""
        response = await self._next_response()
        if response is None:
            self._done = True
            return
        if self.incarnation is None and response.incarnation:  # the first response's
            self.incarnation = self._template.incarnation = response.incarnation
        self._records.extend(response.records)
        self._response_next = response.next_offset
        self.end_offset = response.end_offset
        if self.on_high_watermark is not None and response.high_watermark:
            self.on_high_watermark(response.high_watermark)
        if not response.records:
            self._advance(response.next_offset)
            if response.passed_scn:  # the records before it were all handed out
                self.passed = PassedPosition(self.partition, response.passed_scn,
                                             response.passed_offset)
                self._passed_unyielded = True
            if self.on_tail is not None and (not response.passed_scn
                                             or response.next_offset >= response.end_offset):
                self.on_tail(response.next_offset)

    async def items(self) -> AsyncIterator[ReadBatch | PassedPosition]:
        """Iterate as `async for batch in reader`, and also get a PassedPosition where
        the broker said a filtered follow read (or bootstrap, online) passed records its
        filter dropped whole: every batch before it came first. It carries no event."""
        if self._bootstrap is not None:
            while (item := await self._bootstrap_item()) is not None:
                yield item
            return
        while True:
            if not self._records and self._passed_unyielded and self.passed is not None:
                self._passed_unyielded = False
                yield self.passed
            elif self._records:
                yield await self.__anext__()  # a batch at hand: no wait
            elif self._done or self._reached_stop():
                await self.close()
                return
            else:
                await self._receive()

    async def _bootstrap_item(self) -> ReadBatch | PassedPosition | None:
        """A bootstrap's next batch or passed position (kept in `passed`); None: over."""
        item = await self._bootstrap.next_item() if self._bootstrap is not None else None
        if item is None:
            await self.close()
            return None
        if self.incarnation is None and self._bootstrap is not None:  # the first message's
            self.incarnation = self._bootstrap.incarnation
        output = bootstrap_output(item, self.topic, self.partition)
        self.passed = output if isinstance(output, PassedPosition) else self.passed
        return output

    def drain_buffered(self) -> list[ReadBatch]:
        """The batches already received and not yet taken, without waiting (a relay
        follower stores them together in one write)."""
        batches = [ReadBatch(record) for record in self._records]
        self._records.clear()
        if batches:
            self._advance(self._response_next)
        return batches

    def _advance(self, offset: int) -> None:
        if self._next_offset is None or offset > self._next_offset:
            self._next_offset = offset

    def _reached_stop(self) -> bool:
        return (self.stop_offset is not None and self._next_offset is not None
                and self._next_offset >= self.stop_offset)

    def _request(self) -> pb.ReadRequest:
        """The read request, resuming from next_offset once there is one."""
        request = pb.ReadRequest()
        request.CopyFrom(self._template)
        if self._next_offset is None:
            request.start.CopyFrom(self._start)
        else:
            request.start.offset = self._next_offset
        return request

    async def _next_response(self) -> pb.ReadResponse | None:
        """The next response, reconnecting on failures worth a retry; None at the end."""
        while True:
            try:
                response = await self._stream.read()
            except errors.KeybusError as e:
                if e.code in _TRUNCATED_CODES and await self._rewind_to_leader_end():
                    continue
                raise
            assert response is None or isinstance(response, pb.ReadResponse)
            return response

    async def _find_leader(self) -> None:
        """Several brokers: (re)open the channel on the topic's current leader."""
        assert self._leader is not None
        await self._leader.connect()
        self._channel = self._leader.channel

    async def _rewind_to_leader_end(self) -> bool:
        """Several brokers, after a failover: if the new leader's log ends before our
        next offset (we read events of the old leader that were never acknowledged
        and are gone), go on from its end: events may come again, none is skipped."""
        if self._leader is None or self._channel is None or self._next_offset is None:
            return False
        try:
            info = await stub_of(self._channel).DescribeTopic(
                pb.DescribeTopicRequest(topic=self.topic), timeout=10)
        except grpc.RpcError:
            return False
        ends = [p.end_offset for p in info.partitions if p.partition == self.partition]
        if not ends or ends[0] >= self._next_offset:
            return False
        _log.warning("topic %s/%d: the leader's log ends at %d, before offset %d read from the "
                     "previous leader; reading on from %d", self.topic, self.partition, ends[0],
                     self._next_offset, ends[0])
        self._next_offset = ends[0]
        return True

    async def _renew_channel(self) -> None:
        """Before a stream the broker ended for its credentials is opened again: a
        new channel (the next open makes it) when a rotated client certificate is
        on disk (sdk.channel.renews_channel). A channel given by the caller is kept."""
        if self._leader is not None:
            if await self._leader.renew(time.time()):
                self._channel = None
        elif self._owns_channel and self._channel is not None and \
                renews_channel(self._security, time.time()):
            channel, self._channel = self._channel, None
            await channel.close()

    def _open_call(self) -> Any:
        if self._channel is None:
            self._channel = open_channel(self.broker, self._security)
        return stub_of(self._channel).Read(self._request())

    async def close(self) -> None:
        """Cancel the stream and close the channel it opened. Idempotent."""
        self._done = True
        self._stream.cancel()
        if self._bootstrap is not None:
            self._bootstrap.cancel()
        if self._leader is not None:
            await self._leader.close()
            self._channel = None
        elif self._owns_channel and self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def __aenter__(self) -> Reader:
        try:
            return await self.open()
        except BaseException:
            await self.close()  # no __aexit__ follows a failed __aenter__
            raise

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()


def _slot_wait_ms(slot_wait_timeout_ms: int | None, retry_timeout_ms: int | None,
                  follow: bool) -> int:
    """How long a bootstrap waits for a slot: as asked, else as a lost broker is retried."""
    if slot_wait_timeout_ms is not None:
        return slot_wait_timeout_ms
    return retry_timeout_ms if retry_timeout_ms is not None else retry_timeout_default_ms(follow)


async def read_all(broker: str = "localhost:6650", topic: str = "", partition: int = 0,
                   **options: Any) -> list[Event]:
    """Every event from start to the end of the log (or stop_offset), as rows.

    Args:
        options: as Reader (start, hash_ranges, key_filter, stop_offset, ...);
            follow is not allowed (it would never end).
    Returns:
        The events in offset order.
    Raises:
        ValueError: follow=True. KeybusError: as Reader.
    """
    if options.get("follow"):
        raise ValueError("read_all does not follow: it collects up to the end of the log")
    events: list[Event] = []
    async with Reader(broker, topic, partition, **options) as reader:
        async for batch in reader:
            events.extend(batch.events())
    return events
