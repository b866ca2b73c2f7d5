"""Read: stream a partition's records from a start position.

Responses are built from the stored record bytes (see `wire.py`), so an
unfiltered read never parses or re-encodes an event. With `follow`, the
stream waits at the tail for new records instead of ending; reaching the
tail the first time, it sends one response without records that carries the
position (next_offset), so the reader can resume from there.

A filtered follow read (a filter or hash ranges) also tells, now and then,
how far it passed records its filter dropped whole: a response without
records carrying `passed_scn`/`passed_offset` (broker/read_passed.py says
when), so a Databus consumer can checkpoint past windows none of whose events
it wants. An unfiltered read never sends one.

A read never skips offsets: when retention removes offsets the stream has
not sent yet, it sends what it read before them and ends with OUT_OF_RANGE
(`offset_before_start`) naming them and what the partition holds, as a read
that starts below the partition's start does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import grpc

from broker.config import Settings
from broker.errors import BrokerError
from broker.filtering import compile_selector
from broker.metrics import READ_EVENTS
from broker.partition import Partition
from broker.read_passed import Passed, PassedPositions, tells_passed
from broker.read_path import ReadSpec
from broker.rpc import wire
from broker.rpc.status import streaming
from broker.tail_wait import now_ms, wait_at_tail
from broker.topics import TopicRegistry
from sdk.core.filters import KeyFilterSpec
from sdk.core.model import HashRange, RangeError, normalize_ranges, slot_mask
from sdk.core.pb import keybus_pb2 as pb


def read_limit(field: str, value: int, limit: int) -> int:
    if value > limit:
        raise BrokerError("read_limit_invalid", field=field, value=value, max=limit)
    return value or limit


def hash_mask(ranges: list[pb.HashRange]) -> bytes | None:
    if not ranges:
        return None
    try:
        checked = [HashRange(r.slot_first, r.slot_last) for r in ranges]
    except RangeError as e:
        raise BrokerError("hash_range_invalid", detail=f"hash_ranges: {e}") from None
    return slot_mask(normalize_ranges(checked))


class ReadServicer:
    def __init__(self, registry: TopicRegistry, settings: Settings,
                 config_filters: Mapping[str, KeyFilterSpec]) -> None:
        self.registry = registry
        self.settings = settings
        self.config_filters = config_filters

    @streaming
    async def Read(self, request: pb.ReadRequest,
                   context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        partition = self.registry.partition(request.topic, request.partition)
        meta = partition.meta
        if request.incarnation and request.incarnation != meta.incarnation:
            raise BrokerError("read_other_incarnation", topic=request.topic,
                              partition=request.partition, start=start_words(request.start),
                              expected=request.incarnation, current=meta.incarnation)
        spec = ReadSpec(
            topic_id=partition.meta.topic_id,
            partition=partition.index,
            stop_offset=request.stop_offset or None,
            events_max=read_limit("events_max", request.events_max, self.settings.read_events_max),
            bytes_max=read_limit("bytes_max", request.bytes_max, self.settings.read_bytes_max),
            slot_mask=hash_mask(list(request.hash_ranges)),
            # A follower's copy is whole: this broker's config filters are for its readers.
            selector=compile_selector(request.filter,
                                      {} if request.replica else self.config_filters),
        )
        offset = partition.resolve_start(request.start)
        if request.replica:
            async for response in replica_read(partition, spec, offset, request.follow,
                                               self.settings.relay_idle_answer_ms):
                yield response
            return
        # The first response names the topic's incarnation, for the reader to send when
        # it reopens the read (a made-up one may change with the log kept: not named).
        head = wire.first_response_head(meta.incarnation, meta.incarnation_backfilled)
        mark = len(partition.truncations)
        told_position = False
        passing = None  # an unfiltered read keeps the loop it had: no position to tell
        if tells_passed(request.follow, spec):
            passing = PassedPositions(self.settings.read_passed_interval_ms,
                                      self.settings.read_passed_events_max, now_ms())
        while spec.stop_offset is None or offset < spec.stop_offset:
            partition.check_truncation(mark, offset)
            if offset >= partition.end_offset:
                if not request.follow:
                    return
                if not told_position:
                    # A follower at the end learns where it stands at once: it resumes
                    # from there after a reconnect (a re-resolved "latest" would skip
                    # what was produced meanwhile) and knows it reached the broker.
                    passed = passing.take(now_ms()) if passing is not None else None
                    yield head + _position(offset, partition.end_offset, passed)
                    told_position = True
                    head = b""
                    # Look again before waiting: the reader, told, may have produced
                    # while this stream was suspended at the yield, and that append's
                    # wake-up came before the wait (SDK Reader.open waits for this
                    # response, then its user produces).
                    continue
                passed = await wait_at_tail(partition.wait_for_change, passing)
                if passed is not None:  # after the position above, which had the head
                    yield _position(offset, partition.end_offset, passed)
                continue
            chunk = await partition.read(spec, offset)
            offset = max(offset, chunk.next_offset)
            if chunk.records:
                READ_EVENTS.labels(request.topic).inc(chunk.events)
                if head:  # the first response only: one test per response, none per record
                    yield head + wire.read_response(chunk.records, offset, partition.end_offset)
                    head = b""
                else:
                    yield wire.read_response(chunk.records, offset, partition.end_offset)
            if passing is not None:
                passing.process_chunk(chunk.passed, chunk.scanned_events, bool(chunk.records),
                                      now_ms())
                passed = passing.due(now_ms())
                if passed is not None:
                    yield head + _position(offset, partition.end_offset, passed)
                    head = b""
            if chunk.removed is not None:  # retention removed what the read reached next
                raise partition.removed_error(*chunk.removed)


def start_words(start: pb.StartPosition) -> str:
    """A start position as a message says it: "offset 100", "earliest", "SCN 7"."""
    which = start.WhichOneof("position")
    if which == "offset":
        return f"offset {start.offset}"
    if which == "scn":
        return f"SCN {start.scn}"
    return which or "an unset start"


def _position(next_offset: int, end_offset: int, passed: Passed | None) -> bytes:
    """A response without records: the read's position, and how far it passed
    records its filter dropped whole when it has that to tell."""
    if passed is None:
        return wire.read_response([], next_offset, end_offset)
    return wire.passed_response(next_offset, end_offset, passed.scn, passed.offset)


async def replica_read(partition: Partition, spec: ReadSpec, offset: int,
                       follow: bool, idle_answer_ms: int = 1_000) -> AsyncIterator[bytes]:
    """A follower's copy: records to the durable log end, each response with the
    high watermark (what this broker's readers may see), and a response with
    no records whenever only the high watermark moved, so the follower learns
    it without new data. Idle at the tail, it sends a response without records
    every `idle_answer_ms` (`relay_idle_answer_ms`, 1 s; Kafka's follower fetch returns empty after
    replica.fetch.wait.max.ms the same way): the follower's "heard from its
    upstream" (keybus_relay_seconds_since_upstream_read) then measures its
    upstream, not how long ago a producer wrote; HTTP/2 keepalive pings alone
    find a dead connection, but the follower cannot see when one was last
    answered. Ends with `log_truncated` when this broker's log is
    cut below `offset` (the follower's next offset) since the stream opened,
    and with `offset_before_start` when retention removed offsets it reached
    (a copy never skips them: the follower resets its copy, broker/relay/follower.py)."""
    mark = len(partition.truncations)
    sent_high_watermark = -1
    while spec.stop_offset is None or offset < spec.stop_offset:
        if offset >= partition.log_end and partition.end_offset == sent_high_watermark:
            if not follow:
                return
            try:
                async with asyncio.timeout(idle_answer_ms / 1000):
                    await partition.wait_for_change()
            except TimeoutError:  # idle: say so (the same position, no records)
                yield wire.read_response([], offset, partition.log_end, sent_high_watermark)
                continue
            partition.check_truncation(mark, offset)
            continue
        partition.check_truncation(mark, offset)
        chunk = await partition.read(spec, offset, replica=True)
        offset = max(offset, chunk.next_offset)
        high_watermark = partition.end_offset
        if chunk.records or high_watermark != sent_high_watermark:
            sent_high_watermark = high_watermark
            yield wire.read_response(chunk.records, offset, partition.log_end, high_watermark)
        if chunk.removed is not None:
            raise partition.removed_error(*chunk.removed)
