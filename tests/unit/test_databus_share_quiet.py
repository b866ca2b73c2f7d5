"""A quiet Key_Shared stream closes a window's share only once the stream is
confirmed up (share_windows.ShareWindows._quiet, rule 5 of framing.py).

Goal: a broker killed mid-window can look connected for a moment (grpcio has not
yet handled the closed socket). Closing the open share by the linger then would
present part of a window as the whole of it, as an integration run under load
did (test_databus_failures, streamed). Method: the source's receive loop over a
fake consumer (parts, then silence) and a fake stream whose round trip says up,
not yet, or gone; the items the loop hands the runner are checked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import grpc.aio

from sdk.consumer import ConsumerConfig
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus import DatabusConfig
from sdk.databus.inbox import AbortItem, Inbox, PieceItem
from sdk.databus.share_windows import ShareWindows
from sdk.received import ReceivedBatch
from sdk.stream import SubscribeStream

LINGER_MS = 20
WINDOW_LAST = 11  # a window of offsets 0..11, delivered in parts of 4


class FakeStream:
    """A stream whose every round trip says `up`."""

    def __init__(self, up: bool) -> None:
        self.up = up
        self.probes = 0

    async def confirm(self, timeout_s: float) -> bool:
        self.probes += 1
        return self.up


class FakeConsumer:
    """Hands out the scripted parts, then waits out every receive (a quiet stream);
    `on_probe` may replace the stream, as a reconnect does."""

    def __init__(self, parts: list[ReceivedBatch], stream: FakeStream) -> None:
        self.parts = parts
        self.stream: FakeStream | None = stream

    async def receive_batch(self, timeout_s: float) -> ReceivedBatch:
        if self.parts:
            return self.parts.pop(0)
        await asyncio.sleep(timeout_s)
        raise TimeoutError


class ReadyWatch:
    def ready(self) -> bool:
        return True  # the channel still looks connected


def part(first: int, last: int) -> ReceivedBatch:
    offsets = list(range(first, last + 1))
    record = pb.Record(topic="t", partition=0, base_offset=0, scn_first=1, window=True,
                       offsets=offsets,
                       batch=pb.EventBatch(count=len(offsets), key_ints=offsets,
                                           values=[b"v"] * len(offsets)))
    return ReceivedBatch(record, [], WINDOW_LAST)


def source(buffering: bool) -> ShareWindows:
    windows = ShareWindows("127.0.0.1:1", "t", "s", name="n", need_slots=False,
                           config=DatabusConfig(window_buffering=buffering,
                                                window_linger_ms=LINGER_MS),
                           consumer_config=ConsumerConfig(type="key_shared"))
    windows._watch = ReadyWatch()  # type: ignore[assignment]
    return windows


def run(windows: ShareWindows, consumer: FakeConsumer, quiet_s: float = 0.3,
        during: Callable[[], None] | None = None) -> list[object]:
    """The receive loop for a while; what it put in the inbox, in order."""
    async def go() -> list[object]:
        task = asyncio.get_running_loop().create_task(windows._receive(consumer))  # type: ignore[arg-type]
        await asyncio.sleep(quiet_s / 2)
        if during is not None:
            during()
        await asyncio.sleep(quiet_s / 2)
        task.cancel()
        items: list[object] = []
        inbox: Inbox = windows.inbox
        while (item := await inbox.get(0.001)) is not None:
            items.append(item)
        return items
    return asyncio.run(go())


def reconnect(consumer: FakeConsumer) -> None:
    consumer.stream = FakeStream(True)


def closed_offsets(items: list[object]) -> list[list[int]]:
    """The offsets of each share the runner was told is whole (a closing piece)."""
    shares: list[list[int]] = []
    current: list[int] = []
    for item in items:
        if isinstance(item, AbortItem):
            current = []
        elif isinstance(item, PieceItem):
            current += [item.piece.payload.offset_at(i) for i in item.piece.positions]
            if item.closes:
                shares.append(current)
                current = []
    return shares


def test_a_quiet_stream_not_confirmed_keeps_the_share_open() -> None:
    """The broker died unnoticed: no answer to the probe, so the linger closes nothing
    (the old code closed the streamed share here: part of a window as the whole)."""
    for buffering in (True, False):
        stream = FakeStream(False)
        consumer = FakeConsumer([part(0, 3), part(4, 7)], stream)
        items = run(source(buffering), consumer)
        assert closed_offsets(items) == [], (buffering, items)
        assert stream.probes >= 2  # asked again at each linger
        assert not any(isinstance(item, AbortItem) for item in items)


def test_a_confirmed_quiet_stream_closes_the_share_by_the_linger() -> None:
    """Confirmed up: the rest of the window went to other consumers (rule 1)."""
    for buffering in (True, False):
        stream = FakeStream(True)
        consumer = FakeConsumer([part(0, 3), part(4, 7)], stream)
        items = run(source(buffering), consumer)
        assert closed_offsets(items) == [list(range(8))], (buffering, items)
        assert stream.probes == 1


def test_a_replaced_stream_drops_the_share_for_its_redelivery() -> None:
    """The consumer reconnected: the new stream redelivers the parts, so the share is
    dropped (a streamed one aborted: the runner rolls it back), never closed."""
    for buffering in (True, False):
        consumer = FakeConsumer([part(0, 3)], FakeStream(False))  # died unnoticed

        items = run(source(buffering), consumer, during=lambda c=consumer: reconnect(c))
        assert closed_offsets(items) == [], (buffering, items)
        aborts = [item for item in items if isinstance(item, AbortItem)]
        assert len(aborts) == (0 if buffering else 1), items


def test_a_share_that_completes_needs_no_probe() -> None:
    stream = FakeStream(False)
    consumer = FakeConsumer([part(0, 3), part(4, 7), part(8, 11)], stream)
    items = run(source(True), consumer, quiet_s=0.1)
    assert closed_offsets(items) == [list(range(12))]
    assert stream.probes == 0


class ProbeStub:
    """A stub whose WhoAmI ends with `code` (None: answered)."""

    def __init__(self, code: grpc.StatusCode | None) -> None:
        self.code = code

    async def WhoAmI(self, request: pb.WhoAmIRequest, timeout: float) -> pb.WhoAmIResponse:
        if self.code is not None:
            raise grpc.aio.AioRpcError(self.code, grpc.aio.Metadata(), grpc.aio.Metadata(), "x")
        return pb.WhoAmIResponse()


class OpenCall:
    def __init__(self, done: bool) -> None:
        self._done = done

    def done(self) -> bool:
        return self._done


def confirmed(code: grpc.StatusCode | None, call_done: bool = False) -> bool:
    stream = SubscribeStream(ProbeStub(code), pb.SubscribeOpen())  # type: ignore[arg-type]
    stream._call = OpenCall(call_done)
    return asyncio.run(stream.confirm(1.0))


def test_the_probe_counts_any_answer_and_no_silence() -> None:
    """A refusal is an answer (the broker is up: a window never stays open for good
    because the broker turns the probe down); no answer, or an ended call, is not."""
    assert confirmed(None)
    assert confirmed(grpc.StatusCode.PERMISSION_DENIED)
    assert confirmed(grpc.StatusCode.UNIMPLEMENTED)
    for silent in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                   grpc.StatusCode.CANCELLED):
        assert not confirmed(silent)
    assert not confirmed(None, call_done=True)
