"""Open streams end when their credentials expire or their grant is revoked.

Goal: a consumer's Subscribe stream keeps no right it lost while open
(docs/security.md, broker/rpc/stream_rights.py): a JWT's expiry ends it with
UNAUTHENTICATED "token expired; get a new one" and a consumer without a new
token fails with that, once; a consumer reading its token from a file that
was rotated before the expiry reopens its stream with the new token and
loses nothing (every event received, in per-key order, all acknowledged); a
revoked consume grant ends the stream with PERMISSION_DENIED naming the
principal, the topic and the permission. A following Reader with a rotated
token file reads on across the expiry, and so does a Producer: every event
stored once.
Method: one real broker process with TLS, static tokens and HS256 JWTs and a
short `auth_recheck_interval_ms`; SDK Consumers, a Reader and a Producer in
this process. A superuser (static token, no expiry) produces throughout.
Every wait is bounded by a deadline; none is an assertion.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk import errors
from sdk.access_admin import AccessAdmin
from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.producer import Producer
from sdk.reader import Reader
from sdk.security import ClientSecurity
from sdk.subscription_admin import SubscriptionAdmin
from tests.support.broker_process import BrokerProcess
from tests.support.security import SUPERUSER, TOKENS, SecureSetup

RECHECK_MS = 300
WAIT_S = 30.0  # the longest any step may take before the test fails


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    return SecureSetup.make(tmp_path_factory.mktemp("reauth-tls"))


@pytest.fixture(scope="module")
def broker(setup: SecureSetup, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("reauth") / "data", *setup.broker_args(),
                            "--auth-recheck-interval-ms", str(RECHECK_MS))
    process.start()

    async def grant() -> None:
        async with AccessAdmin(process.address, security=setup.security(SUPERUSER)) as admin:
            await admin.grant("alice", "reauth.*", ["consume"])
            await admin.grant("alice", "reauth.produce", ["produce"])
    asyncio.run(grant())
    yield process
    process.stop()


async def _create(broker: BrokerProcess, setup: SecureSetup, topic: str) -> None:
    async with Admin(broker.address, security=setup.security(SUPERUSER)) as admin:
        await admin.create_topic(topic)


async def _produce_until(broker: BrokerProcess, setup: SecureSetup, topic: str,
                         stop: asyncio.Event, sent: list[int]) -> None:
    """Produce key i % 5 with value i every 20 ms until `stop` (at most WAIT_S)."""
    deadline = time.monotonic() + WAIT_S
    async with await Producer.create(broker.address, topic,
                                     security=setup.security(SUPERUSER)) as producer:
        while not stop.is_set() and time.monotonic() < deadline:
            i = len(sent)
            await producer.send(i % 5, b"%d" % i)
            await producer.flush()
            sent.append(i)
            await asyncio.sleep(0.02)


def _write_token(path: Path, token: str) -> None:
    """Replace the token file in one step, as a rotating agent does."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(token)
    os.replace(temporary, path)


def test_a_consumer_whose_token_expires_is_cut_off_with_unauthenticated(
        broker: BrokerProcess, setup: SecureSetup) -> None:
    topic = "reauth.expire"
    alice = setup.security(token=setup.hs256("alice", expires_in_s=3))  # no new token

    async def go() -> None:
        await _create(broker, setup, topic)
        stop, sent = asyncio.Event(), []
        producing = asyncio.create_task(_produce_until(broker, setup, topic, stop, sent))
        consumer = await Consumer.subscribe(broker.address, topic, "s", start="earliest",
                                            security=alice)
        received = 0
        try:
            with pytest.raises(errors.Unauthenticated) as refused:
                deadline = time.monotonic() + WAIT_S
                while time.monotonic() < deadline:
                    consumer.ack(await consumer.receive(WAIT_S))
                    received += 1
        finally:
            stop.set()
            await producing
            await consumer.close()
        assert received > 0  # it read while its token was valid
        assert "Subscribe: token expired; get a new one" in str(refused.value)
        # Failed once, and stays failed: no retry loop behind the error.
        with pytest.raises(errors.Unauthenticated):
            await consumer.receive(0.1)
    asyncio.run(go())


def test_a_consumer_whose_token_file_is_rotated_reads_on_and_loses_nothing(
        broker: BrokerProcess, setup: SecureSetup, tmp_path: Path) -> None:
    topic = "reauth.rotate"
    token_file = tmp_path / "alice.jwt"
    _write_token(token_file, setup.hs256("alice", expires_in_s=3))
    alice = ClientSecurity(ca_file=setup.path("ca.pem"), token_file=str(token_file))

    async def go() -> None:
        await _create(broker, setup, topic)
        stop, sent = asyncio.Event(), []
        producing = asyncio.create_task(_produce_until(broker, setup, topic, stop, sent))
        consumer = await Consumer.subscribe(broker.address, topic, "s", type="key_shared",
                                            start="earliest", security=alice)
        first_stream = consumer.stream
        _write_token(token_file, setup.hs256("alice", expires_in_s=600))  # before the expiry
        seen: dict[int, int] = {}  # offset -> value, first delivery
        order: dict[int, list[int]] = {}  # key -> values in order of first delivery
        deadline = time.monotonic() + WAIT_S
        try:
            # Read on until the broker ended the first stream (the token it was opened
            # with expired) and the consumer has read on its new stream for a while.
            while consumer.stream is first_stream and time.monotonic() < deadline:
                message = await consumer.receive(WAIT_S)
                if message.offset not in seen:
                    seen[message.offset] = int(message.value)
                    order.setdefault(int(message.event.key), []).append(int(message.value))
                consumer.ack(message)
            assert consumer.stream is not first_stream, "the first stream was never ended"
            await asyncio.sleep(0.5)
            stop.set()
            await producing
            while len(seen) < len(sent) and time.monotonic() < deadline:
                message = await consumer.receive(WAIT_S)
                if message.offset not in seen:
                    seen[message.offset] = int(message.value)
                    order.setdefault(int(message.event.key), []).append(int(message.value))
                consumer.ack(message)
            await consumer.flush_acks()
            assert sorted(seen.values()) == sent  # nothing lost
            for values in order.values():
                assert values == sorted(values)  # per-key order held
            async with SubscriptionAdmin(broker.address,
                                         security=setup.security(SUPERUSER)) as admin:
                while time.monotonic() < deadline:  # the acks reach the broker
                    info = await admin.describe_subscription(topic, "s")
                    if info.partitions[0].mark_delete == len(sent):
                        break
                    await asyncio.sleep(0.05)
                assert info.partitions[0].mark_delete == len(sent)
        finally:
            stop.set()
            await producing
            await consumer.close()
    asyncio.run(go())


def test_revoking_the_consume_grant_ends_the_stream_with_permission_denied(
        broker: BrokerProcess, setup: SecureSetup) -> None:
    topic = "reauth.revoke"
    root = setup.security(SUPERUSER)

    async def go() -> None:
        await _create(broker, setup, topic)
        async with AccessAdmin(broker.address, security=root) as access:
            await access.grant("bob", topic, ["consume"])
        stop, sent = asyncio.Event(), []
        producing = asyncio.create_task(_produce_until(broker, setup, topic, stop, sent))
        consumer = await Consumer.subscribe(broker.address, topic, "s", start="earliest",
                                            security=setup.security("bob"))
        try:
            consumer.ack(await consumer.receive(WAIT_S))
            async with AccessAdmin(broker.address, security=root) as access:
                assert await access.revoke("bob", topic, ["consume"]) == 1
            with pytest.raises(errors.PermissionDenied) as denied:
                deadline = time.monotonic() + WAIT_S
                while time.monotonic() < deadline:
                    consumer.ack(await consumer.receive(WAIT_S))
        finally:
            stop.set()
            await producing
            await consumer.close()
        assert ("principal 'bob' lacks the consume permission on topic 'reauth.revoke' needed "
                "for Subscribe") in str(denied.value)
    asyncio.run(go())


def test_a_following_reader_with_a_rotated_token_file_reads_across_the_expiry(
        broker: BrokerProcess, setup: SecureSetup, tmp_path: Path) -> None:
    topic = "reauth.read"
    token_file = tmp_path / "alice.jwt"
    _write_token(token_file, setup.hs256("alice", expires_in_s=3))
    alice = ClientSecurity(ca_file=setup.path("ca.pem"), token_file=str(token_file))

    async def go() -> None:
        await _create(broker, setup, topic)
        stop, sent = asyncio.Event(), []
        producing = asyncio.create_task(_produce_until(broker, setup, topic, stop, sent))
        offsets: list[int] = []
        deadline = time.monotonic() + WAIT_S
        try:
            async with Reader(broker.address, topic, start="earliest", follow=True,
                              security=alice) as reader:
                offsets += (await asyncio.wait_for(anext(reader), WAIT_S)).offsets  # opened
                _write_token(token_file, setup.hs256("alice", expires_in_s=600))
                while time.monotonic() < deadline:
                    batch = await asyncio.wait_for(anext(reader), WAIT_S)
                    offsets += batch.offsets
                    if reader.reconnects and len(offsets) > 20:
                        break
                assert reader.reconnects == 1  # reopened once, at the expiry
        finally:
            stop.set()
            await producing
        assert offsets == list(range(len(offsets)))  # no gap, no repeat
    asyncio.run(go())


def test_a_producer_with_a_rotated_token_file_writes_across_the_expiry(
        broker: BrokerProcess, setup: SecureSetup, tmp_path: Path) -> None:
    topic = "reauth.produce"
    token_file = tmp_path / "alice.jwt"
    _write_token(token_file, setup.hs256("alice", expires_in_s=3))
    alice = ClientSecurity(ca_file=setup.path("ca.pem"), token_file=str(token_file))
    ended = "Produce stream of principal 'alice' ended: Produce: token expired"

    async def go() -> None:
        await _create(broker, setup, topic)
        futures = []
        deadline = time.monotonic() + WAIT_S
        async with await Producer.create(broker.address, topic, security=alice) as producer:
            await (await producer.send(0, b"0"))  # the stream is open, with the first token
            futures.append(None)
            _write_token(token_file, setup.hs256("alice", expires_in_s=600))
            # Sends pipelined without waiting: batches are in flight when the stream ends.
            while ended not in broker.log_path.read_text() and time.monotonic() < deadline:
                futures.append(await producer.send(len(futures), b"%d" % len(futures)))
                await asyncio.sleep(0.002)
            for _ in range(20):  # and after the new stream opened
                futures.append(await producer.send(len(futures), b"%d" % len(futures)))
            await producer.flush()
            for future in futures[1:]:
                await future  # raises the event's failure
        sent = len(futures)
        assert ended in broker.log_path.read_text()
        async with Reader(broker.address, topic, stop_offset=sent,
                          security=setup.security(SUPERUSER)) as reader:
            values = [int(v) async for batch in reader for v in batch.values]
        assert values == list(range(sent))  # each stored once, in order
    asyncio.run(go())


def test_a_following_reader_with_a_token_provider_reads_across_the_expiry(
        broker: BrokerProcess, setup: SecureSetup) -> None:
    """`token_provider` (Kafka's OAUTHBEARER callback): the renewed token it returns is
    sent by the reopened stream; a provider that fails fails the call naming it."""
    topic = "reauth.provider"
    current = [setup.hs256("alice", expires_in_s=3)]
    alice = ClientSecurity(ca_file=setup.path("ca.pem"), token_provider=lambda: current[0])

    async def go() -> None:
        await _create(broker, setup, topic)
        stop, sent = asyncio.Event(), list[int]()
        producing = asyncio.create_task(_produce_until(broker, setup, topic, stop, sent))
        offsets: list[int] = []
        deadline = time.monotonic() + WAIT_S
        try:
            async with Reader(broker.address, topic, start="earliest", follow=True,
                              security=alice) as reader:
                offsets += (await asyncio.wait_for(anext(reader), WAIT_S)).offsets  # opened
                current[0] = setup.hs256("alice", expires_in_s=600)  # the provider renews
                while time.monotonic() < deadline:
                    batch = await asyncio.wait_for(anext(reader), WAIT_S)
                    offsets += batch.offsets
                    if reader.reconnects and len(offsets) > 20:
                        break
                assert reader.reconnects == 1  # reopened once, at the expiry
        finally:
            stop.set()
            await producing
        assert offsets == list(range(len(offsets)))  # no gap, no repeat

        agent = {"up": True}

        def agent_token() -> str:
            if not agent["up"]:
                raise ConnectionError("identity agent not reachable")
            return TOKENS[SUPERUSER]
        failing = ClientSecurity(ca_file=setup.path("ca.pem"), token_provider=agent_token)
        async with Admin(broker.address, security=failing) as admin:
            await admin.describe_topic(topic)
            agent["up"] = False  # the next call asks the provider again, and it fails
            with pytest.raises(errors.KeybusError) as failed:
                await admin.describe_topic(topic)
        assert ("token_provider agent_token raised ConnectionError: identity agent not "
                "reachable") in str(failed.value)
    asyncio.run(go())
