"""One Subscribe call: a bounded queue of requests in, responses out.

The consumer's background task owns it; a reconnect makes a new one. The
request side is an async generator that sends `open` first and then what
the consumer queues (permits, acks, nacks); `None` in the queue half-closes
the stream, which the broker answers by ending it cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio

from sdk import errors
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc

REQUESTS_MAX = 1024  # queued requests per stream; each carries a whole batch of acks
# A probe that ended so got no answer from the broker (`confirm`).
_NO_ANSWER = frozenset((grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                        grpc.StatusCode.CANCELLED))


class SubscribeStream:
    """A Subscribe call; `open()` waits for the broker's `opened` answer."""

    def __init__(self, stub: pb_grpc.KeybusAsyncStub, open_request: pb.SubscribeOpen) -> None:
        self._stub = stub
        self._open_request = open_request
        self._queue: asyncio.Queue[pb.SubscribeRequest | None] = asyncio.Queue(REQUESTS_MAX)
        self._call: Any = None

    async def _requests(self) -> AsyncIterator[pb.SubscribeRequest]:
        yield pb.SubscribeRequest(open=self._open_request)
        while (request := await self._queue.get()) is not None:
            yield request

    async def open(self) -> pb.Opened:
        """Start the call and wait until the consumer is attached.

        Raises:
            grpc.aio.AioRpcError: the broker refused (its status says why) or is down.
            KeybusError: the stream ended without an answer.
        """
        self._call = self._stub.Subscribe(self._requests())
        first = await self._call.read()
        if first is grpc.aio.EOF:
            raise errors.Unavailable("the broker ended the Subscribe stream before attaching")
        if first.WhichOneof("body") != "opened":
            raise errors.KeybusError(f"the broker answered `open` with {first.WhichOneof('body')}")
        opened: pb.Opened = first.opened
        return opened

    async def read(self) -> pb.SubscribeResponse | None:
        """The next response; None when the broker ended the stream cleanly.

        Raises:
            grpc.aio.AioRpcError: the stream failed.
        """
        response = await self._call.read()
        if response is grpc.aio.EOF:
            return None
        assert isinstance(response, pb.SubscribeResponse)
        return response

    async def confirm(self, timeout_s: float) -> bool:
        """Whether this stream is still up after a round trip to its broker.

        A broker killed a moment ago can look connected: the channel and the call
        learn of it only when grpcio handles the closed socket, so a quiet stream
        alone does not say the broker had nothing more to send. A WhoAmI on the
        same channel (any authenticated caller may ask it) either fails or
        returns after grpcio has handled what came before it on the connection,
        a closed one included: the call is then done. Any answer counts, a
        refusal too (a broker that answers is up), so a probe the broker turns
        down never keeps a window open for good. False when no answer came
        (unreachable, timed out) or the call has ended.
        """
        if self._call is None or self._call.done():
            return False
        try:
            await self._stub.WhoAmI(pb.WhoAmIRequest(), timeout=timeout_s)
        except grpc.aio.AioRpcError as e:
            if e.code() in _NO_ANSWER:
                return False
        await asyncio.sleep(0)  # a failure grpcio handed over with the answer runs first
        return not self._call.done()

    async def send(self, request: pb.SubscribeRequest) -> None:
        await self._queue.put(request)

    def half_close(self) -> None:
        """No more requests: the broker then ends the stream cleanly."""
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    def cancel(self) -> None:
        if self._call is not None:
            self._call.cancel()

    def close(self) -> None:
        """End a stream that is done with (failed, or replaced by a reconnect): the call,
        and the request side. Why both: grpcio's task that sends the requests waits on
        this stream's queue, and a cancelled call does not end it; left waiting, one
        task per reconnect stays pending for good, and asyncio reports each at exit."""
        self.half_close()
        self.cancel()
