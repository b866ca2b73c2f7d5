"""A producer whose client certificate expired before its files were rotated recovers;
an InitProducer refused for good fails the batches waiting for it.

Goal: the broker refuses every call on a connection whose client certificate
expired (UNAUTHENTICATED at open, so no answer came first). Once a usable
certificate is on disk, the producer opens a new channel and goes on; until
then, and when the new channel is refused too, the waiting batches fail at once
with Unauthenticated, never retried as a lost broker. Before: the sender renewed
its channel only after an answered stream, so once its certificate expired idle
it failed the next send, then retried InitProducer on the old channel until each
batch's delivery timeout, even with the new files on disk ("lost the broker").
Method: a Sender whose stubs refuse or answer as a broker would, and whose
`reauthenticate` (the producer's channel renewal) gives a new stub only once the
"files" were rotated. No broker, no loop but the test's.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import grpc
import pytest

from sdk import errors
from sdk.core.pb import keybus_pb2 as pb
from sdk.send_queue import ProducerBatch
from sdk.sender import Sender
from tests.support.scripted_call import rpc_error
from tests.unit.test_producer_columns import Token

EXPIRED = "client certificate expired (notAfter passed); get a new one"


def _expired() -> grpc.aio.AioRpcError:
    """The broker's refusal of a call on a connection whose certificate expired."""
    return rpc_error(grpc.StatusCode.UNAUTHENTICATED, EXPIRED)


class _RefusedCall:
    """A Produce stream the broker refuses at open."""

    async def read(self) -> Any:
        raise _expired()

    async def write(self, request: Any) -> None:
        await asyncio.sleep(0)  # grpcio queues the write; the read tells the refusal

    def cancel(self) -> None:
        pass


class _Stub:
    """A broker's stub on one channel: `expired` refuses every call, as the broker
    does on a connection whose certificate passed its notAfter."""

    def __init__(self, expired: bool) -> None:
        self.expired = expired
        self.calls = 0

    def Produce(self) -> Any:  # gRPC's method names
        self.calls += 1
        if self.expired:
            return _RefusedCall()
        raise AssertionError("only refusals are streamed here")

    async def InitProducer(self, request: Any, timeout: float) -> pb.InitProducerResponse:
        self.calls += 1
        if self.expired:
            raise _expired()
        return pb.InitProducerResponse(producer_id=7, next_sequences=[0])


class _Files:
    """The certificate files: `reauthenticate` opens a channel on them only once a
    usable certificate is there (sdk.channel.renews_channel), with `fresh` its state."""

    def __init__(self, fresh_expired: bool = False) -> None:
        self.rotated = False
        self.fresh = _Stub(expired=fresh_expired)
        self.renewals = 0

    async def reauthenticate(self) -> _Stub | None:
        if not self.rotated:
            return None
        self.renewals += 1
        return self.fresh


def _batch() -> ProducerBatch:
    request = pb.ProduceRequest(topic="t", partition=0)
    request.batch.key_ints.append(1)
    request.batch.values.append(b"v")
    return ProducerBatch(request, 1, Token(), deadline_ms=10**12, buffered=1)


def _refused(batch: ProducerBatch) -> bool:
    """Whether the batch failed with the broker's Unauthenticated, in its words."""
    outcome = cast(Token, batch.token).outcome
    return isinstance(outcome, errors.Unauthenticated) and EXPIRED in str(outcome)


def _sender(old: _Stub, files: _Files) -> Sender:
    sender = Sender(cast(Any, old), "t", 1, reauthenticate=cast(Any, files.reauthenticate))
    sender.queue.reinit(5, [0])
    return sender


def test_a_stream_refused_at_open_goes_on_a_new_channel_once_files_were_rotated() -> None:
    old, files = _Stub(expired=True), _Files()
    files.rotated = True

    async def go() -> Sender:
        sender = _sender(old, files)
        batch = _batch()
        sender.queue.add(batch)
        assert await sender._run_stream() is True  # at once, on the new channel
        assert not batch.token.done()  # not failed: sent again on the new stream
        return sender

    sender = asyncio.run(go())
    assert files.renewals == 1 and sender._stub is cast(Any, files.fresh)


def test_a_stream_refused_at_open_without_new_files_fails_its_batches() -> None:
    old, files = _Stub(expired=True), _Files()

    async def go() -> ProducerBatch:
        sender = _sender(old, files)
        batch = _batch()
        sender.queue.add(batch)
        assert await sender._run_stream() is True  # nothing to back off for: failed
        return batch

    batch = asyncio.run(go())
    assert _refused(batch)


def test_an_init_producer_refused_renews_the_channel_once_files_were_rotated() -> None:
    """The path that hung: after a refused send the next needs a producer id, and
    its InitProducer was retried on the expired channel until the delivery timeout."""
    old, files = _Stub(expired=True), _Files()

    async def go() -> tuple[Sender, ProducerBatch, ProducerBatch]:
        sender = _sender(old, files)
        sender.queue.needs_reinit = True  # as after the refused send failed its batch
        before = _batch()
        sender.queue.add(before)
        assert await sender._try_reinit() is True  # failed at once, not retried
        files.rotated = True
        after = _batch()
        sender.queue.add(after)
        assert await sender._try_reinit() is True  # renewed: at once on the new channel
        assert sender.queue.needs_reinit  # the new channel has not answered yet
        assert await sender._try_reinit() is True
        assert not sender.queue.needs_reinit and sender._lost_since_ms is None
        return sender, before, after

    sender, before, after = asyncio.run(go())
    assert _refused(before)
    assert not after.token.done()  # it waits for the stream, with a producer id now
    assert files.renewals == 1 and sender._stub is cast(Any, files.fresh)


def test_a_new_channel_refused_too_fails_the_batches_without_renewing_again() -> None:
    """Once per refusal: a rotated certificate the broker refuses as well (another
    expired one) is the client's error, not a loop of new channels."""
    old, files = _Stub(expired=True), _Files(fresh_expired=True)
    files.rotated = True

    async def go() -> tuple[ProducerBatch, ProducerBatch]:
        sender = _sender(old, files)
        first = _batch()
        sender.queue.add(first)
        assert await sender._run_stream() is True  # renewed
        assert await sender._run_stream() is True  # refused again: failed
        sender.queue.needs_reinit = True
        second = _batch()
        sender.queue.add(second)  # the next send may renew once more (new files since?)
        assert await sender._try_reinit() is True
        assert await sender._try_reinit() is True
        return first, second

    first, second = asyncio.run(go())
    assert _refused(first) and _refused(second)
    # one stream and two InitProducers went to the new channel; one renewal per send
    assert files.renewals == 2 and files.fresh.calls == 3


class _Refusing:
    """A stub whose InitProducer the broker refuses with `code` (and `details`)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details

    async def InitProducer(self, request: Any, timeout: float) -> Any:
        raise rpc_error(self.code, self.details)


@pytest.mark.parametrize("code, details, fails", [
    (grpc.StatusCode.NOT_FOUND, "topic 't' does not exist", True),
    (grpc.StatusCode.PERMISSION_DENIED, "principal 'app' may not produce to topic 't'", True),
    (grpc.StatusCode.FAILED_PRECONDITION,
     "broker 127.0.0.1:7001 is not the leader of topic 't'; the leader is 127.0.0.1:7002.", False),
    (grpc.StatusCode.UNAVAILABLE, "topic 't' has no leader right now (election); retry shortly",
     False),
], ids=["deleted", "denied", "not the leader", "no leader yet"])
def test_an_init_producer_refused_for_good_fails_at_once_else_is_retried(
        code: grpc.StatusCode, details: str, fails: bool) -> None:
    """The topic deleted under an idempotent producer: its next send needs a new
    producer id, and the refusal "does not exist" was retried as a lost broker
    ("lost the broker (topic 't' does not exist); retrying") until the delivery
    timeout, where a stream refused so fails its batches at once (docs/architecture.md:
    "later sends each fail 'does not exist'"). A leader that moved, or none yet, is
    retried as before."""

    async def go() -> tuple[bool, ProducerBatch, int | None]:
        sender = Sender(cast(Any, _Refusing(code, details)), "t", 1)
        sender.queue.needs_reinit = True
        batch = _batch()
        sender.queue.add(batch)
        return await sender._try_reinit(), batch, sender._lost_since_ms

    healthy, batch, lost_since = asyncio.run(go())
    outcome = cast(Token, batch.token).outcome
    if fails:
        assert healthy and lost_since is None  # nothing to retry: no "lost the broker"
        assert isinstance(outcome, errors.KeybusError) and outcome.code == code.value[0]
        assert details in str(outcome)
    else:
        assert not healthy and lost_since is not None and outcome is None
