"""Bootstrap a partition: its compacted view as a snapshot, then the log.

`Reader(..., start="bootstrap")` reads through `BootstrapStream`: the broker
sends the snapshot (the latest event per key, with its original offset and
SCN), then the catch-up from the snapshot's offset, then, with follow, the
live log, with a marker batch (no events, `marker` set) at each phase change.
Online, a filtered stream also says now and then how far it passed records
its filter dropped whole (an item with `passed`: `Reader.items()` yields it
as a PassedPosition), as a filtered follow read does.

`BootstrapPosition` is where a bootstrap stands, as Databus's checkpoint
modes say it: SNAPSHOT by (source, key), CATCHUP and ONLINE by offset. A
broken stream resumes from the position of the last message received, so a
broker restart costs neither a new snapshot nor a duplicate; an application
that saves `Reader.position` can pass it back as `start` to continue later.

A position is of one topic's log: the broker's first message names the
topic's incarnation (BootstrapResponse.incarnation), and every reopen sends
it (BootstrapRequest.incarnation), so a topic deleted and created again while
the stream was away is refused (`TopicRecreated`, not retried) instead of
resumed by the old topic's key or offset into the new one: the snapshot,
catch-up and online log a reader gets are all of one incarnation.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from sdk import errors
from sdk.core.pb import keybus_pb2 as pb
from sdk.retrying_call import RetryingCall

SNAPSHOT, CATCHUP, ONLINE = "snapshot", "catchup", "online"
_PHASE_NAMES = {pb.SNAPSHOT: SNAPSHOT, pb.CATCHUP: CATCHUP, pb.ONLINE: ONLINE}
_PHASE_VALUES = {name: value for value, name in _PHASE_NAMES.items()}


@dataclass(frozen=True, slots=True)
class PhaseMarker:
    """A phase begins (Databus: start of bootstrap snapshot, catch-up, online).

    Attributes:
        phase: "snapshot", "catchup" or "online".
        snapshot_offset: the snapshot holds every event below this offset;
            the catch-up starts at it.
        snapshot_scn: the view was complete up to this SCN.
        target_offset: where the catch-up ends and online begins.
        consistent_offset: the state built from the stream is one point of
            the log once the stream has passed this offset.
        keys_missing_below: > 0 only for a snapshot asked with
            allow_incomplete_view from a view that lacks keys: those whose
            events are all below this offset are not in it.
    """

    phase: str
    snapshot_offset: int
    snapshot_scn: int
    target_offset: int
    consistent_offset: int
    keys_missing_below: int = 0


@dataclass(frozen=True, slots=True)
class BootstrapPosition:
    """Where a bootstrap stands (a checkpoint). JSON-friendly via to_dict().

    Attributes:
        phase: "snapshot" (by key), "catchup" or "online" (by offset).
        snapshot_offset: the snapshot's point (SNAPSHOT).
        source, key: the last (source, key) delivered; source None: none yet.
        next_offset, target_offset: the next log offset to read and where the
            catch-up ends (CATCHUP, ONLINE).
    """

    phase: str = SNAPSHOT
    snapshot_offset: int = 0
    source: str | None = None
    key: int | str | None = None
    next_offset: int = 0
    target_offset: int = 0

    def to_proto(self) -> pb.BootstrapResume:
        resume = pb.BootstrapResume(phase=_PHASE_VALUES[self.phase],
                                    snapshot_offset=self.snapshot_offset,
                                    next_offset=self.next_offset,
                                    target_offset=self.target_offset)
        if self.source is not None:
            resume.has_source = True
            resume.source = self.source
            if self.key is not None:
                resume.has_key = True
                if isinstance(self.key, str):
                    resume.key_string = self.key
                else:
                    resume.key_int = self.key
        return resume

    @staticmethod
    def from_proto(resume: pb.BootstrapResume) -> BootstrapPosition:
        key: int | str | None = None
        if resume.has_key:
            key = resume.key_string or resume.key_int
        return BootstrapPosition(_PHASE_NAMES[resume.phase], resume.snapshot_offset,
                                 resume.source if resume.has_source else None, key,
                                 resume.next_offset, resume.target_offset)

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "snapshot_offset": self.snapshot_offset,
                "source": self.source, "key": self.key, "next_offset": self.next_offset,
                "target_offset": self.target_offset}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> BootstrapPosition:
        """Raises ValueError naming what is wrong."""
        try:
            position = BootstrapPosition(str(data["phase"]), int(data["snapshot_offset"]),
                                         data.get("source"), data.get("key"),
                                         int(data.get("next_offset", 0)),
                                         int(data.get("target_offset", 0)))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"bootstrap position {dict(data)!r} is invalid: {e}") from None
        if position.phase not in _PHASE_VALUES:
            raise ValueError(f"bootstrap position phase {position.phase!r} is invalid; "
                             "allowed: snapshot, catchup, online")
        return position


def marker_of(marker: pb.BootstrapMarker) -> PhaseMarker:
    return PhaseMarker(_PHASE_NAMES[marker.phase], marker.snapshot_offset, marker.snapshot_scn,
                       marker.target_offset, marker.consistent_offset,
                       marker.keys_missing_below)


def after_record(phase: str, record: pb.Record, message: BootstrapPosition) -> BootstrapPosition:
    """The position after a record of a message (`message`: the position after
    the whole message, which gives the snapshot's offset and the target)."""
    batch = record.batch
    if phase == SNAPSHOT:
        key: int | str = (batch.key_strings[-1] if batch.key_strings and batch.key_strings[-1]
                          else batch.key_ints[-1])
        return BootstrapPosition(SNAPSHOT, message.snapshot_offset,
                                 batch.sources[0] if batch.sources else "", key)
    offsets = record.offsets
    end = offsets[-1] + 1 if offsets else record.base_offset + batch.count
    return BootstrapPosition(phase, message.snapshot_offset, None, None, end,
                             message.target_offset)


@dataclass(slots=True)
class Item:
    """One thing to hand to the application: a record, a marker or (online) a
    passed position, in a phase."""

    phase: str
    record: pb.Record | None
    marker: PhaseMarker | None
    position: BootstrapPosition  # where the bootstrap stands once this item is consumed
    # ONLINE only: (scn, offset) where the stream passed records its filter dropped
    # whole (BootstrapResponse.passed_scn); no record, no marker.
    passed: tuple[int, int] | None = None


def items_of(response: pb.BootstrapResponse, announced: set[str],
             before: BootstrapPosition) -> list[Item]:
    """A response's marker (unless already announced) and records, with positions."""
    phase = _PHASE_NAMES[response.phase]
    after = BootstrapPosition.from_proto(response.resume)
    items: list[Item] = []
    if response.HasField("marker"):
        marker = marker_of(response.marker)
        if marker.phase not in announced:
            announced.add(marker.phase)
            items.append(Item(marker.phase, None, marker, before))
    for record in response.records:
        items.append(Item(phase, record, None, after_record(phase, record, after)))
    if response.passed_scn and phase == ONLINE and not response.records:
        items.append(Item(phase, None, None, after,
                          (response.passed_scn, response.passed_offset)))
    if items:
        items[-1].position = after
    return items


class BootstrapStream:
    """The Bootstrap call behind a Reader: items in order, resumed after breaks.

    Args:
        connect: returns the stub's Bootstrap method (opens the channel lazily).
        request: the request without `resume`; its `incarnation` ("": not known
            yet) is the topic's the bootstrap is of, else the one the first
            message names, sent with every reopen.
        position: where to start (None: a new snapshot).
        follow: after the catch-up, stay online (retries never stop).
        retry_timeout_ms, backoff_ms, backoff_max_ms: as Reader's.
        link: connect_timeout_ms, broker, on_connection_change for RetryingCall.
    """

    def __init__(self, connect: Callable[[], Callable[..., Any]], request: pb.BootstrapRequest,
                 position: BootstrapPosition | None, follow: bool, retry_timeout_ms: int | None,
                 backoff_ms: int, backoff_max_ms: int, **link: Any) -> None:
        self._connect = connect
        self._request = request
        self.received = position  # resume point after the last message received
        self.consumed = position  # position after the last item handed out
        self._announced: set[str] = set() if position is None else self._passed(position)
        self._items: deque[Item] = deque()
        self._stream = RetryingCall(lambda: connect()(self._attempt()), follow,
                                    retry_timeout_ms, backoff_ms, backoff_max_ms, **link)
        self._done = False

    @property
    def reconnects(self) -> int:
        """Streams opened again after a failure (each resumed where it stopped)."""
        return self._stream.reconnects

    @property
    def last_failure(self) -> grpc.RpcError | errors.Unavailable | None:
        """The failure behind the last lost-broker report (RetryingCall.last_failure)."""
        return self._stream.last_failure

    @property
    def incarnation(self) -> str | None:
        """The topic's incarnation the bootstrap is of: given, or named by the
        broker's first message (None until then, and from a broker that names none)."""
        return self._request.incarnation or None

    @staticmethod
    def _passed(position: BootstrapPosition) -> set[str]:
        order = [SNAPSHOT, CATCHUP, ONLINE]
        return set(order[:order.index(position.phase) + 1])

    async def next_item(self) -> Item | None:
        """The next item; None at the end of a bootstrap without follow."""
        while not self._items:
            if self._done:
                return None
            response = await self._next_response()
            if response is None:
                self._done = True
                continue
            if not self._request.incarnation and response.incarnation:  # the first's
                self._request.incarnation = response.incarnation
            before = self.received or BootstrapPosition()
            self._items.extend(items_of(response, self._announced, before))
            self.received = BootstrapPosition.from_proto(response.resume)
        item = self._items.popleft()
        self.consumed = item.position
        return item

    def _attempt(self) -> pb.BootstrapRequest:
        request = pb.BootstrapRequest()
        request.CopyFrom(self._request)
        if self.received is not None:
            request.resume.CopyFrom(self.received.to_proto())
        return request

    async def _next_response(self) -> pb.BootstrapResponse | None:
        response = await self._stream.read()
        assert response is None or isinstance(response, pb.BootstrapResponse)
        return response

    def cancel(self) -> None:
        self._done = True
        self._stream.cancel()

