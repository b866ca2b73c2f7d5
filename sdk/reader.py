"""Reader: stream one partition's log from a start position, no subscription.

Yields one ReadBatch per stored record (the columns stay protobuf; row views
are built only when `events()` is called). Tracks the next offset to read, so
a broken stream resumes where it left off (sdk/reconnect.py: a broker never
reached fails within connect_timeout_ms; a lost one is reported through
`on_connection_change` and retried for retry_timeout_ms). The broker's relay
follower and the Spark connector read through this class; `TopicReader`
(topic_reader.py) merges one per partition.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import open_channel, stub_of
from sdk.core.columns import Event, keys_of, record_events, record_offsets, record_scns
from sdk.core.filters import KeyFilterSpec
from sdk.core.model import HashRange, parse_ranges
from sdk.core.pb import keybus_pb2 as pb
from sdk.reconnect import ConnectionCallback, Link, RetryPolicy, failure_of

# Stream failures worth a reconnect (a restarting broker shows as these).
_RETRIABLE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                    grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}

Start = str | int | Mapping[str, int]


class _ToProto(Protocol):
    def to_proto(self) -> pb.KeyFilter: ...


class ReadBatch:
    """The events of one stored record that passed the read's ranges and filter."""

    __slots__ = ("_offsets", "record")

    def __init__(self, record: pb.Record) -> None:
        self.record = record
        self._offsets: list[int] | None = None

    @property
    def count(self) -> int:
        return self.record.batch.count

    @property
    def partition(self) -> int:
        return self.record.partition

    @property
    def offsets(self) -> list[int]:
        """The offset of every event (dense unless the read filtered some out)."""
        if self._offsets is None:
            self._offsets = record_offsets(self.record)
        return self._offsets

    @property
    def next_offset(self) -> int:
        """The offset after this batch's last event."""
        offsets = self.record.offsets
        if offsets:
            return offsets[-1] + 1
        return self.record.base_offset + self.record.batch.count

    @property
    def values(self) -> Sequence[bytes]:
        """The value column (a protobuf repeated field: no copy)."""
        return self.record.batch.values

    def keys(self) -> list[int | str]:
        """The primary key of every event."""
        return keys_of(self.record.batch)

    def scns(self) -> list[int]:
        """The SCN of every event (one per window)."""
        return record_scns(self.record)

    def events(self) -> list[Event]:
        """Row views (a Python object per event: prefer the columns when hot)."""
        return record_events(self.record)

    def __repr__(self) -> str:
        r = self.record
        return (f"ReadBatch(partition={r.partition}, base_offset={r.base_offset}, "
                f"count={self.count}, scn_first={r.scn_first}, window={r.window})")


class Reader:
    """Async iterator of ReadBatch over one partition.

    Args:
        broker: "host:port" (ignored when `channel` is given).
        topic, partition: what to read.
        start: "earliest" (default), "latest", an offset (int), or {"scn": n}
            (the first event whose SCN is >= n).
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
        channel: a grpc.aio channel to share (not closed by close()).
    Raises (while iterating):
        TopicNotFound, InvalidArgument, OffsetOutOfRange, Unavailable, KeybusError.
    """

    def __init__(self, broker: str = "localhost:6650", topic: str = "", partition: int = 0, *,
                 start: Start = "earliest",
                 hash_ranges: str | Iterable[HashRange | tuple[int, int]] | None = None,
                 key_filter: str | pb.KeyFilter | _ToProto | None = None, follow: bool = False,
                 stop_offset: int | None = None, events_max: int = 0, bytes_max: int = 0,
                 connect_timeout_ms: int = 5_000, retry_timeout_ms: int | None = None,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1_000,
                 on_connection_change: ConnectionCallback | None = None,
                 channel: grpc.aio.Channel | None = None) -> None:
        if not topic:
            raise ValueError("topic is empty; give the name of an existing topic")
        if type(partition) is not int or partition < 0:
            raise ValueError(f"partition {partition!r} is invalid: need an int >= 0")
        if stop_offset is not None and (type(stop_offset) is not int or stop_offset < 1):
            raise ValueError(f"stop_offset {stop_offset!r} is invalid: an exclusive end "
                             "offset >= 1, or None")
        self.broker = broker
        self.topic = topic
        self.partition = partition
        self.follow = follow
        self.stop_offset = stop_offset
        self._template = pb.ReadRequest(
            topic=topic, partition=partition, hash_ranges=ranges_to_proto(hash_ranges),
            filter=filter_to_proto(key_filter), events_max=events_max, bytes_max=bytes_max,
            follow=follow, stop_offset=stop_offset or 0)
        self._start = start_to_proto(start)
        if retry_timeout_ms is None:
            retry_timeout_ms = 0 if follow else 30_000
        self._link = Link(broker, RetryPolicy(connect_timeout_ms, retry_timeout_ms,
                                              retry_backoff_ms, retry_backoff_max_ms))
        self._on_connection_change = on_connection_change
        self._channel = channel
        self._owns_channel = channel is None
        self._call: grpc.aio.UnaryStreamCall[pb.ReadRequest, pb.ReadResponse] | None = None
        self._records: deque[pb.Record] = deque()
        self._response_next = 0
        self._next_offset: int | None = None
        self.end_offset: int | None = None  # log end at the last response (lag)
        self._done = False

    @property
    def next_offset(self) -> int | None:
        """The offset to resume from (None until the first response)."""
        return self._next_offset

    def __aiter__(self) -> Reader:
        return self

    async def __anext__(self) -> ReadBatch:
        while not self._records:
            if self._done or self._reached_stop():
                await self.close()
                raise StopAsyncIteration
            response = await self._next_response()
            if response is None:
                self._done = True
                continue
            self._records.extend(response.records)
            self._response_next = response.next_offset
            self.end_offset = response.end_offset
            if not response.records:
                self._advance(response.next_offset)
        batch = ReadBatch(self._records.popleft())
        self._advance(self._response_next if not self._records else batch.next_offset)
        return batch

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
                if self._call is None:
                    if self._channel is None:
                        self._channel = open_channel(self.broker)
                    self._call = stub_of(self._channel).Read(self._request())
                response = await self._call.read()
            except grpc.RpcError as e:
                self._call = None
                if e.code() not in _RETRIABLE_CODES:
                    raise errors.from_rpc_error(e, self.broker) from None
                reason, never_reached = failure_of(e)
                delay_ms, message = self._link.process_failure(reason, never_reached, _now_ms())
                if message is not None:
                    await self._report(False, message)
                await asyncio.sleep(delay_ms / 1000)
                continue
            if self._link.lost or not self._link.ever_connected:
                await self._connected()
            if response is grpc.aio.EOF:
                self._call = None
                return None
            assert isinstance(response, pb.ReadResponse)
            return response

    async def _connected(self) -> None:
        message = self._link.process_connected(_now_ms())
        if message is not None:
            await self._report(True, message)

    async def _report(self, connected: bool, message: str) -> None:
        if self._on_connection_change is not None:
            result = self._on_connection_change(connected, message)
            if inspect.isawaitable(result):
                await result

    async def close(self) -> None:
        """Cancel the stream and close the channel it opened. Idempotent."""
        self._done = True
        if self._call is not None:
            self._call.cancel()
            self._call = None
        if self._owns_channel and self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def __aenter__(self) -> Reader:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()


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


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def start_to_proto(start: Start) -> pb.StartPosition:
    """A StartPosition from "earliest", "latest", an offset or {"scn": n}.

    Raises:
        ValueError: anything else, naming what is allowed.
    """
    if start == "earliest":
        return pb.StartPosition(earliest=True)
    if start == "latest":
        return pb.StartPosition(latest=True)
    if type(start) is int and start >= 0:
        return pb.StartPosition(offset=start)
    if isinstance(start, Mapping) and set(start) == {"scn"} and type(start["scn"]) is int \
            and start["scn"] >= 0:
        return pb.StartPosition(scn=start["scn"])
    raise ValueError(f"start {start!r} is invalid: use 'earliest', 'latest', an offset >= 0, "
                     "or {'scn': n}")


def ranges_to_proto(
        ranges: str | Iterable[HashRange | tuple[int, int]] | None) -> list[pb.HashRange]:
    """Hash ranges as protobuf, checked by the shared rules (sdk.core.model).

    Raises:
        ValueError (RangeError): a range outside 0..65535 or first > last.
    """
    if ranges is None:
        return []
    if isinstance(ranges, str):
        checked = parse_ranges(ranges)
    else:
        checked = [r if isinstance(r, HashRange) else HashRange(*r) for r in ranges]
    return [pb.HashRange(slot_first=r.slot_first, slot_last=r.slot_last) for r in checked]


def filter_to_proto(key_filter: str | pb.KeyFilter | _ToProto | None) -> pb.KeyFilter | None:
    """A KeyFilter message from a message, anything with to_proto(), or the
    CLI text form ("mod:10:[0,3]", "range:5000000:[1,3-6]@orders").

    Raises:
        ValueError: an object that is none of those (FilterError for bad text).
    """
    if key_filter is None or isinstance(key_filter, pb.KeyFilter):
        return key_filter
    if isinstance(key_filter, str):
        return KeyFilterSpec.parse_cli(key_filter).to_proto()
    to_proto = getattr(key_filter, "to_proto", None)
    if callable(to_proto):
        message = to_proto()
        if isinstance(message, pb.KeyFilter):
            return message
    raise ValueError(f"key_filter {key_filter!r} is invalid: give a keybus KeyFilter message "
                     "or an object with to_proto()")
