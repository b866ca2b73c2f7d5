"""Bootstrap: stream a partition's compacted view, then its log (broker/view).

The servicer checks the request and builds the specs; `BootstrapStream`
runs the phases. Responses are assembled as bytes (stored records go out
untouched in the catch-up), so the method has its own generic handler with
an identity serializer, registered beside the service's other methods.
Permission (security): reading the topic, as Read.

`bootstrap_streams_max` bounds the streams in their snapshot or catch-up:
each holds a view iterator or reads the log in bulk on worker threads, and
pins the log against retention. A stream that is caught up and follows the
log costs what a follow Read costs, so it gives its slot back; otherwise
readers that bootstrapped once and follow (the CLI's and the SDK's default)
would lock every later bootstrap out for as long as they run. A filtered
following stream gets a pacer of passed positions for its online phase, as
a filtered follow Read does (broker/read_passed.py).

Incarnation: the first message names the topic's (BootstrapResponse.incarnation,
put before it as bytes, as the Read servicer does), and a request naming
another is refused before anything is read or a slot taken
(`bootstrap_other_incarnation`): the topic was deleted and created again
since the reader's bootstrap began, so its position (a key of the old view,
an offset of the old log) and the state the reader built are of another log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping

import grpc

from broker.config import Settings
from broker.errors import BrokerError
from broker.filtering import compile_selector
from broker.read_passed import PassedPositions, tells_passed
from broker.read_path import ReadSpec
from broker.rpc import wire
from broker.rpc.read_servicer import hash_mask, read_limit
from broker.rpc.service import SERVICE
from broker.rpc.status import streaming
from broker.topics import TopicRegistry
from broker.view import codec
from broker.view.bootstrap import INCARNATION_TAG, BootstrapStream, source_selector
from broker.view.snapshot import Position, SnapshotCursor, SnapshotSpec
from sdk.core.filters import KeyFilterSpec
from sdk.core.pb import keybus_pb2 as pb


def check_sources(sources: list[str]) -> tuple[str, ...]:
    if len(set(sources)) != len(sources):
        twice = sorted({s for s in sources if sources.count(s) > 1})
        raise BrokerError("bootstrap_sources_invalid",
                          detail=f"{twice} named more than once; name each source once, in "
                                 "the order to stream them")
    for source in sources:
        if len(source.encode()) > codec.SOURCE_BYTES_MAX:
            raise BrokerError("bootstrap_sources_invalid",
                              detail=f"a source name of {len(source.encode())} bytes is over "
                                     f"the limit of {codec.SOURCE_BYTES_MAX}")
    return tuple(sources)


class StreamSlots:
    """At most `limit` slots held at once; each slot is given back once, when
    its stream is caught up or when it ends, whichever comes first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self) -> Callable[[], None]:
        """A slot (its release function), or too_many_bootstraps when all are held."""
        if self.held >= self.limit:
            raise BrokerError("too_many_bootstraps", max=self.limit)
        self.held += 1
        taken = True

        def release() -> None:
            nonlocal taken
            if taken:
                taken = False
                self.held -= 1
        return release


class BootstrapServicer:
    def __init__(self, registry: TopicRegistry, settings: Settings,
                 config_filters: Mapping[str, KeyFilterSpec]) -> None:
        self.registry = registry
        self.settings = settings
        self.config_filters = config_filters
        self.slots = StreamSlots(settings.bootstrap_streams_max)

    @streaming
    async def Bootstrap(self, request: pb.BootstrapRequest,
                        context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        stream = self._stream(request)
        meta = stream.partition.meta
        # The first message names the topic's incarnation, for the reader to send when it
        # reopens the stream (a made-up one may change with the log kept: not named).
        head = b"" if request.replica else wire.first_response_head(
            meta.incarnation, meta.incarnation_backfilled, INCARNATION_TAG)
        stream.caught_up = release = self.slots.take()
        try:
            async for message in stream.run():
                if head:  # the first message only: one test per message, none per record
                    yield head + message
                    head = b""
                else:
                    yield message
        finally:
            release()

    def _stream(self, request: pb.BootstrapRequest) -> BootstrapStream:
        partition = self.registry.partition(request.topic, request.partition)
        current = partition.meta.incarnation
        if request.incarnation and request.incarnation != current:
            raise BrokerError("bootstrap_other_incarnation", topic=request.topic,
                              partition=request.partition, position=resume_words(request),
                              expected=request.incarnation, current=current)
        view = self.registry.views.of(request.topic, request.partition)
        sources = check_sources(list(request.sources))
        # A follower loading its view (broker/view/load.py) takes it whole: this broker's
        # config filters are for its readers, as on a replica read.
        selector = compile_selector(request.filter,
                                    {} if request.replica else self.config_filters)
        mask = hash_mask(list(request.hash_ranges))
        events_max = read_limit("events_max", request.events_max, self.settings.read_events_max)
        bytes_max = read_limit("bytes_max", request.bytes_max, self.settings.read_bytes_max)
        topic_id = partition.meta.topic_id
        snapshot = SnapshotSpec(request.topic, topic_id, partition.index, sources, mask, selector,
                                request.include_tombstones, events_max, bytes_max)
        read = ReadSpec(topic_id, partition.index, request.stop_offset or None, events_max,
                        bytes_max, mask,
                        source_selector(frozenset(sources), selector) if sources else selector)
        views = self.registry.views.views

        def open_cursor(position: Position, snapshot_offset: int | None) -> SnapshotCursor:
            return SnapshotCursor(views, snapshot, position, snapshot_offset)

        passing = None  # an unfiltered stream tells no passed position (as a Read)
        if tells_passed(request.follow, read):
            settings = self.settings

            def passing(now_ms: int) -> PassedPositions:
                return PassedPositions(settings.read_passed_interval_ms,
                                       settings.read_passed_events_max, now_ms)

        return BootstrapStream(partition, view, snapshot, read, request, open_cursor,
                               passing=passing)


def resume_words(request: pb.BootstrapRequest) -> str:
    """Where a bootstrap request starts, as the refusal says it: "a new snapshot",
    "the snapshot as of offset 60", "the catch-up at offset 70", "online at offset 90"."""
    if not request.HasField("resume"):
        return "a new snapshot"
    resume = request.resume
    if resume.phase == pb.CATCHUP:
        return f"the catch-up at offset {resume.next_offset}"
    if resume.phase == pb.ONLINE:
        return f"online at offset {resume.next_offset}"
    return f"the snapshot as of offset {resume.snapshot_offset}"


def _identity(data: bytes) -> bytes:
    return data


def bootstrap_handler(servicer: BootstrapServicer) -> grpc.GenericRpcHandler:
    """The Bootstrap method of the Keybus service (responses are bytes)."""
    return grpc.method_handlers_generic_handler(SERVICE, {
        "Bootstrap": grpc.unary_stream_rpc_method_handler(
            servicer.Bootstrap, pb.BootstrapRequest.FromString, _identity)})
