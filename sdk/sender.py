"""The producer's background send task: owns the Produce stream.

`Sender` (the shell) moves bytes: one writer coroutine, one reader task on a
bidi `Produce` call, an expiry task, reconnects with capped backoff. What it
sends, and what each answer means, is decided by the pure `SendQueue`
(send_queue.py, which states the idempotence rules).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import retry_wait
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.reconnect import failure_of, reauthenticates
from sdk.send_queue import (  # re-exported: callers import them from here
    GAP_RETRIES_MAX,
    PRODUCER_ID_CHOSEN_BIT,
    PRODUCER_ID_MAX,
    BatchResult,
    Completion,
    Outcome,
    ProducedEvent,
    ProducerBatch,
    SendQueue,
    check_producer_id,
)

_log = logging.getLogger("keybus.producer")

# How a Produce stream ends when the broker goes away (or refuses a new id).
_EXPECTED_STREAM_FAILURES = (grpc.RpcError, errors.KeybusError, asyncio.InvalidStateError,
                             ConnectionError)
# An InitProducer refused so fails the batches waiting for it, as a stream refused at open
# does: credentials, rights, a deleted topic. "Not the leader" (FAILED_PRECONDITION) and
# UNAVAILABLE are retried: the leader moves, a broker comes back.
_INIT_REFUSALS = {errors.UNAUTHENTICATED, errors.PERMISSION_DENIED, errors.NOT_FOUND,
                  errors.INVALID_ARGUMENT, errors.UNIMPLEMENTED}
# Stream failures with these codes are not worth a reconnect: fail the batches.
_PERMANENT_STREAM_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.FAILED_PRECONDITION,
}


def _describe(failure: BaseException) -> str:
    """A failure with its kind, for the debug log and a bug's one line: never a repr."""
    if isinstance(failure, grpc.RpcError):
        return f"{failure.code().name}: {failure.details()}"
    return f"{type(failure).__name__}: {failure}" if str(failure) else type(failure).__name__


def _reason(failure: BaseException) -> str:
    """What went wrong, in a user's words ("connection refused", the broker's message)."""
    if isinstance(failure, grpc.RpcError):
        return failure_of(failure)[0]
    if isinstance(failure, asyncio.InvalidStateError):  # grpcio's "RPC already finished."
        return "connection closed"  # a request written on a call that had ended under it
    return str(failure) or type(failure).__name__


def now_ms() -> int:
    """Monotonic milliseconds: the shells' one clock."""
    return int(time.monotonic() * 1000)


class Sender:
    """The shell: one Produce stream, pipelined, re-established on failure.

    Runs on the event loop that created it; `submit` must be called there too.
    """

    def __init__(self, stub: pb_grpc.KeybusAsyncStub, topic: str, partitions: int, *,
                 in_flight_max: int = 16, delivery_timeout_ms: int = 120_000,
                 idempotent: bool = True, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 1_000, request_timeout_ms: int = 30_000,
                 on_done: Callable[[ProducerBatch], None] | None = None,
                 producer_id: int | None = None,
                 relocate: Callable[[], Awaitable[pb_grpc.KeybusAsyncStub]] | None = None,
                 channel: Callable[[], grpc.aio.Channel | None] | None = None,
                 reauthenticate: Callable[[], Awaitable[pb_grpc.KeybusAsyncStub | None]]
                 | None = None, broker: Callable[[], str] | None = None) -> None:
        assert in_flight_max >= 1 and delivery_timeout_ms >= 1
        assert producer_id is None or (idempotent and producer_id >= PRODUCER_ID_CHOSEN_BIT)
        self._chosen_producer_id = producer_id
        self._stub = stub
        self.topic = topic
        # Several brokers: after a failure, find the leader again (sdk/cluster.py).
        self._relocate = relocate
        # The stub's channel now: a retry waits for it to connect, not its whole backoff.
        self._channel = channel or (lambda: None)
        # A stream ended for its credentials: a stub on a new channel for a rotated
        # client certificate (sdk.channel.renews_channel), or None to keep this one.
        self._reauthenticate = reauthenticate
        # The address the stub talks to now (with several brokers, the leader's), for
        # the messages: an operator with several brokers needs to know which one.
        self._broker = broker or (lambda: "")
        self.queue = SendQueue(topic, partitions, idempotent, redirects=relocate is not None)
        self.in_flight_max = in_flight_max
        self.delivery_timeout_ms = delivery_timeout_ms
        self._backoff_first_ms = retry_backoff_ms
        self._backoff_max_ms = retry_backoff_max_ms
        self._request_timeout_s = request_timeout_ms / 1000
        self._on_done = on_done
        self._wakeup = asyncio.Event()  # work arrived, a response came, a stream ended
        self._progress = asyncio.Event()  # some batch finished
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._answered = False  # a response arrived on the current stream
        # A refusal before any answer opened a new channel (see _reauthenticated).
        self._renewed_unanswered = False
        self._lost_since_ms: int | None = None  # an attempt failed, no answer since
        self._last_failure = ""  # why, for the delivery timeout's message

    async def start(self) -> None:
        """Get a producer id (when idempotent; a chosen one needs no call, rule 5)
        and start the background tasks.

        Raises:
            KeybusError: InitProducer failed (e.g. TopicNotFound, Unavailable).
        """
        if self._chosen_producer_id is not None:
            self.queue.reinit(self._chosen_producer_id, [0] * self.queue.partitions)
        elif self.queue.idempotent:
            await self._init_producer()
        self._tasks = [asyncio.create_task(self._run(), name=f"keybus-sender-{self.topic}"),
                       asyncio.create_task(self._expire_loop(), name="keybus-expiry")]

    def submit(self, batch: ProducerBatch) -> None:
        """Queue a batch for sending (behind earlier batches of its partition)."""
        if self._closing and not self._tasks:
            self._finish([(batch, errors.ProducerClosed("the producer is closed"))])
            return
        self.queue.add(batch)
        self._wakeup.set()

    async def flush(self) -> None:
        """Wait until every batch submitted so far is answered or failed."""
        waiting = set(self.queue.pending())
        while waiting:
            self._progress.clear()
            await self._progress.wait()
            waiting.intersection_update(self.queue.pending())

    async def close(self, timeout_ms: int | None = None) -> None:
        """Flush (up to timeout_ms; None = the delivery timeout), then stop.

        Batches still pending fail with ProducerClosed.
        """
        self._closing = True
        timeout = (self.delivery_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.flush()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self._finish(self.queue.process_fail_all(
            errors.ProducerClosed("the producer closed before the broker answered")))

    def _finish(self, outcomes: list[Outcome]) -> None:
        for batch, outcome in outcomes:
            token = batch.token
            if not token.done():
                if isinstance(outcome, BatchResult):
                    token.set_result(outcome)
                else:
                    token.set_exception(outcome)
            if self._on_done is not None:
                self._on_done(batch)
        if outcomes:
            self._progress.set()

    async def _init_producer(self) -> None:
        try:
            response = await self._stub.InitProducer(
                pb.InitProducerRequest(topic=self.topic), timeout=self._request_timeout_s)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        self.queue.reinit(response.producer_id, list(response.next_sequences))

    async def _run(self) -> None:
        """Connect when there is work; on failure back off and reconnect."""
        backoff_ms = self._backoff_first_ms
        while True:
            while not self.queue.pending():
                self._wakeup.clear()
                await self._wakeup.wait()
            try:
                if self.queue.needs_reinit:
                    healthy = await self._try_reinit()
                else:
                    healthy = await self._run_stream()
            except Exception as e:  # a bug here must not silently stop every send
                _log.exception("produce stream for topic %r failed unexpectedly", self.topic)
                self.queue.process_stream_broken()
                self._lost(_reason(e))
                healthy = False
            if healthy:
                continue
            if self._answered:
                backoff_ms = self._backoff_first_ms
            await retry_wait(self._channel(), backoff_ms)
            await self._find_leader()
            backoff_ms = min(backoff_ms * 2, self._backoff_max_ms)

    async def _find_leader(self) -> None:
        """Several brokers: point the stub at the current leader (it may have moved)."""
        if self._relocate is None:
            return
        try:
            self._stub = await self._relocate()
        except errors.KeybusError as e:
            _log.log(logging.DEBUG if self._lost_since_ms is not None else logging.INFO,
                     "topic %r: no leader found yet (%s); retrying", self.topic, e)
            self._last_failure = str(e)

    async def _renew_stub(self) -> bool:
        """A stub on a new channel for a rotated client certificate, if the producer
        opens one; with several brokers, no leader found now is a failed attempt
        (the next one looks again). Whether the stub was renewed."""
        if self._reauthenticate is None:
            return False
        try:
            renewed = await self._reauthenticate()
        except errors.KeybusError as e:
            self._lost(str(e))
            return False
        if renewed is None:
            return False
        self._stub = renewed
        return True

    async def _reauthenticated(self) -> bool:
        """After UNAUTHENTICATED: whether to try again at once, with credentials read
        anew (sdk/reconnect.py rule 6).

        An open stream the broker ended for its credentials is opened again (on a new
        channel when a rotated client certificate is on disk). A refusal before any
        answer is the client's error, except once when a usable certificate is on disk
        now: the channel still holds one that expired before its files were rotated,
        and the broker refuses every call on that connection, so without a new channel
        the producer never recovered. Once per refusal: a second one is failed.
        """
        if self._answered:
            await self._renew_stub()
            return True
        if self._renewed_unanswered:
            return False
        self._renewed_unanswered = await self._renew_stub()
        return self._renewed_unanswered

    def _the_broker(self) -> str:
        """"the broker at HOST:PORT", as the Reader's messages name it (sdk/reconnect.py)."""
        address = self._broker()
        return f"the broker at {address}" if address else "the broker"

    def _fail_all(self, error: errors.KeybusError) -> None:
        """Fail every pending batch with an error no retry mends: the broker's refusal,
        naming the broker (of its kind, with its code and catalogue name)."""
        self._renewed_unanswered = False
        refused = type(error)(f"{self._the_broker()} refused the producer of topic "
                              f"{self.topic!r}: {error.message}", error.code)
        refused.broker_error = error.broker_error
        self._finish(self.queue.process_fail_all(refused))

    async def _try_reinit(self) -> bool:
        self._answered = False  # a new attempt: nothing answered it yet
        try:
            await self._init_producer()
        except errors.KeybusError as e:
            if e.code == errors.UNAUTHENTICATED and await self._reauthenticated():
                return True  # on a channel with the rotated certificate, at once
            if e.code in _INIT_REFUSALS:  # as a stream refused at open: no retry mends it
                self._fail_all(e)
                return True
            # gRPC's socket text in a user's words, as a stream's
            self._lost(errors.connection_failure(e.message) or str(e))
            return False
        self._renewed_unanswered = False
        self._reached()
        return True

    def _lost(self, reason: str, refused: bool = False) -> None:
        """An attempt failed: remember why, and say so once until the broker answers
        again (never silent: what is sent waits meanwhile, up to its delivery timeout).
        `refused`: the broker answered, but cannot take produce now (UNAVAILABLE,
        "not the leader"); `reason` is then its message."""
        self._last_failure = reason
        if self._lost_since_ms is None:
            self._lost_since_ms = now_ms()
            what = f": {self._the_broker()} cannot take produce now" if refused \
                else f" lost {self._the_broker()}"
            _log.warning("producer of topic %r%s (%s); retrying; events not answered within "
                         "delivery_timeout_ms=%d fail", self.topic, what, reason,
                         self.delivery_timeout_ms)

    def _reached(self) -> None:
        if self._lost_since_ms is not None:
            _log.info("producer of topic %r: %s answers again after %.1f s", self.topic,
                      self._the_broker(), (now_ms() - self._lost_since_ms) / 1000)
            self._lost_since_ms = None

    async def _run_stream(self) -> bool:
        """Write batches on one stream until it ends; True when no backoff is due."""
        self._answered = False
        call = self._stub.Produce()
        reader = asyncio.create_task(self._read(call))
        failure: BaseException | None = None
        try:
            await self._write(call, reader)
        except _EXPECTED_STREAM_FAILURES as e:
            failure = e
        finally:
            reader.cancel()
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.RpcError):
                await reader
        if failure is None and not reader.cancelled():
            failure = reader.exception()
        if self._answered:  # a channel renewed for a refusal was accepted: renew anew next time
            self._renewed_unanswered = False
        if isinstance(failure, grpc.RpcError) and failure.code() in _PERMANENT_STREAM_CODES:
            if reauthenticates(failure) and await self._reauthenticated():
                self.queue.process_stream_broken()  # a new stream reads the token anew
                return True
            self._fail_all(errors.from_rpc_error(failure))
            return True
        if failure is not None and not isinstance(failure, _EXPECTED_STREAM_FAILURES):
            _log.error("produce stream for topic %r broke: %s", self.topic, _describe(failure))
        elif failure is not None:  # said to the user by _lost below, in its words: debug only
            _log.debug("produce stream for topic %r broke (%s); reconnecting", self.topic,
                       _describe(failure))
        refusal = self.queue.refusal
        if failure is None and refusal:  # the stream was ended here, after the broker's refusal
            self._lost(refusal, refused=True)
        else:
            self._lost(_reason(failure) if failure is not None else "the stream ended")
        self.queue.process_stream_broken()
        return False

    async def _write(self, call: grpc.aio.StreamStreamCall[pb.ProduceRequest,
                     pb.ProduceResponse], reader: asyncio.Task[None]) -> None:
        """Pipeline writes up to in_flight_max; return when the reader stops."""
        queue = self.queue
        while not reader.done() and not queue.reconnect_requested:
            self._wakeup.clear()
            if queue.needs_reinit and not queue.in_flight:
                await self._init_producer()
            batch = queue.next_to_write(self.in_flight_max)
            if batch is None:
                await self._wakeup.wait()
                continue
            await call.write(batch.request)

    async def _read(self, call: grpc.aio.StreamStreamCall[pb.ProduceRequest,
                    pb.ProduceResponse]) -> None:
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    return
                queue = self.queue
                self._finish(queue.process_response(response))
                if not queue.reconnect_requested:  # a refusal to retry is no answer yet
                    self._answered = True
                    if self._lost_since_ms is not None:  # a call per answer only when lost
                        self._reached()
                if queue.unsent or queue.reconnect_requested or queue.needs_reinit:
                    self._wakeup.set()  # the writer may go on (else submit wakes it)
        finally:
            self._wakeup.set()

    async def _expire_loop(self) -> None:
        """Fail batches past delivery_timeout_ms (checked a few times per timeout)."""
        interval_s = min(1.0, self.delivery_timeout_ms / 4000)
        while True:
            await asyncio.sleep(interval_s)
            last = f" (last error: {self._last_failure})" if self._lost_since_ms is not None \
                else ""
            error = errors.DeliveryTimeout(
                f"no answer from {self._the_broker()} within delivery_timeout_ms="
                f"{self.delivery_timeout_ms}{last}; the events may or may not be stored")
            outcomes = self.queue.process_expiry(now_ms(), error)
            if outcomes:
                self._finish(outcomes)
                self._wakeup.set()


__all__ = ["GAP_RETRIES_MAX", "PRODUCER_ID_CHOSEN_BIT", "PRODUCER_ID_MAX", "BatchResult",
           "Completion", "Outcome", "ProducedEvent", "ProducerBatch", "SendQueue", "Sender",
           "check_producer_id", "now_ms"]
