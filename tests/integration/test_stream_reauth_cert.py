"""An open stream authenticated by a client certificate ends at the certificate's notAfter.

Goal: as a JWT stream at `exp`, a following Read whose principal is its mTLS
client certificate's common name (no token) is ended by the broker at the
certificate's notAfter with UNAUTHENTICATED "client certificate expired",
and the SDK, whose reopen on the same connection is refused the same way,
fails with that once. gRPC gives the broker the peer certificate's PEM in
the call's auth context (`x509_pem_cert`), from which notAfter is read.
Method: one real broker process with TLS, mTLS principals and a short
`auth_recheck_interval_ms`; a client certificate valid for a few seconds,
issued by the broker's client CA; a Reader in this process. Bounded waits.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from broker.security import certs
from sdk import errors
from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.producer import Producer
from sdk.reader import Reader
from sdk.security import ClientSecurity
from tests.support.broker_process import BrokerProcess
from tests.support.security import SUPERUSER, SecureSetup

WAIT_S = 30.0


def test_a_stream_opened_with_a_client_certificate_ends_at_its_not_after(
        tmp_path: Path) -> None:
    setup = SecureSetup.make(tmp_path / "tls")
    broker = BrokerProcess(tmp_path / "data", *setup.broker_args(mtls=True),
                           "--auth-recheck-interval-ms", "300")
    broker.start()
    try:
        ca = certs.load_ca(setup.directory)
        assert ca is not None
        # A certificate naming the superuser, valid for 8 s from now.
        certs.write_pair(setup.directory, "client-brief", certs.issue(ca, "root",
                                                                      valid_days=8 / 86_400))
        brief = ClientSecurity(ca_file=setup.path("ca.pem"),
                               cert_file=setup.path("client-brief.pem"),
                               key_file=setup.path("client-brief.key"))

        async def go() -> None:
            async with Admin(broker.address, security=setup.security(SUPERUSER, client_cert="alice")) as admin:
                await admin.create_topic("cert")
            async with await Producer.create(broker.address, "cert",
                                             security=setup.security(SUPERUSER, client_cert="alice")) as producer:
                await (await producer.send(0, b"0"))
            began = time.monotonic()
            async with Reader(broker.address, "cert", start="earliest", follow=True,
                              security=brief) as reader:
                assert (await asyncio.wait_for(anext(reader), WAIT_S)).offsets == [0]
                with pytest.raises(errors.Unauthenticated) as ended:
                    await asyncio.wait_for(anext(reader), WAIT_S)
            assert time.monotonic() - began < 12
            assert "client certificate expired (notAfter passed); get a new one" in \
                str(ended.value)
        asyncio.run(go())
    finally:
        broker.stop()
    assert ("Read stream of principal 'root' ended: Read: client certificate expired" in
            broker.log_path.read_text())


@pytest.mark.parametrize("listed", [False, True], ids=["one broker", "broker list"])
def test_clients_whose_certificate_files_were_rotated_carry_on_across_its_not_after(
        tmp_path: Path, listed: bool) -> None:
    """A Reader, a Consumer and a Producer opened with a short-lived certificate whose
    files are replaced before its notAfter: the broker ends their streams at notAfter,
    and each opens a new channel with the certificate now on disk and goes on, no error
    surfacing. Before: the reopen went on the old channel, whose connection still
    carried the expired certificate, and each failed once with Unauthenticated. Given
    as a broker list, the clients follow the topic's leader (sdk/cluster.py), whose
    channel is opened again the same way."""
    setup = SecureSetup.make(tmp_path / "tls")
    broker = BrokerProcess(tmp_path / "data", *setup.broker_args(mtls=True),
                           "--auth-recheck-interval-ms", "300")
    broker.start()
    life_s = 10.0
    try:
        ca = certs.load_ca(setup.directory)
        assert ca is not None
        certs.write_pair(setup.directory, "client-rotated",
                         certs.issue(ca, "root", valid_days=life_s / 86_400))
        expires = time.monotonic() + life_s
        rotated = ClientSecurity(ca_file=setup.path("ca.pem"),
                                 cert_file=setup.path("client-rotated.pem"),
                                 key_file=setup.path("client-rotated.key"))
        ended = [f"{rpc} stream of principal 'root' ended: {rpc}: client certificate expired"
                 for rpc in ("Read", "Subscribe", "Produce")]

        address = f"{broker.address},{broker.address}" if listed else broker.address

        async def go() -> None:
            async with Admin(broker.address, security=rotated) as admin:
                await admin.create_topic("rotated")
            producer = await Producer.create(address, "rotated", security=rotated)
            reader = Reader(address, "rotated", start="earliest", follow=True,
                            security=rotated)
            consumer = await Consumer.subscribe(address, "rotated", "s",
                                                start="earliest", security=rotated)
            try:
                await asyncio.wait_for(await producer.send(0, b"0"), WAIT_S)
                assert (await asyncio.wait_for(anext(reader), WAIT_S)).offsets == [0]
                first = await consumer.receive(WAIT_S)
                consumer.ack(first)
                first_stream = consumer.stream
                fresh = certs.issue(ca, "root", valid_days=1)  # a key takes a while under load
                assert time.monotonic() < expires - 1, "set-up outlived the certificate"
                certs.write_pair(setup.directory, "client-rotated", fresh)  # the rotation
                deadline = time.monotonic() + life_s + WAIT_S
                while not all(line in broker.log_path.read_text() for line in ended):
                    assert time.monotonic() < deadline, "the broker did not end the streams"
                    await asyncio.sleep(0.1)
                await asyncio.wait_for(await producer.send(1, b"1"), WAIT_S)
                assert (await asyncio.wait_for(anext(reader), WAIT_S)).offsets == [1]
                second = await consumer.receive(WAIT_S)
                assert (first.offset, second.offset) == (0, 1)
                assert consumer.stream is not first_stream and reader.reconnects >= 1
            finally:
                await consumer.close()
                await reader.close()
                await producer.close()
        asyncio.run(go())
    finally:
        broker.stop()


def test_a_producer_whose_certificate_expired_before_its_files_were_rotated_recovers(
        tmp_path: Path) -> None:
    """Files rotated late, after the certificate's notAfter: a send meanwhile fails at
    once with the broker's Unauthenticated; once the new files are there the next send
    goes through on a new channel. Before: the producer kept its channel, whose
    connection still held the expired certificate, and retried its InitProducer there
    ("lost the broker ... retrying") until every later send's delivery timeout."""
    setup = SecureSetup.make(tmp_path / "tls")
    broker = BrokerProcess(tmp_path / "data", *setup.broker_args(mtls=True),
                           "--auth-recheck-interval-ms", "300")
    broker.start()
    try:
        ca = certs.load_ca(setup.directory)
        assert ca is not None
        certs.write_pair(setup.directory, "client-late",
                         certs.issue(ca, "root", valid_days=4 / 86_400))
        late = ClientSecurity(ca_file=setup.path("ca.pem"), cert_file=setup.path("client-late.pem"),
                              key_file=setup.path("client-late.key"))
        ended = "Produce stream of principal 'root' ended: Produce: client certificate expired"

        async def go() -> None:
            async with Admin(broker.address, security=late) as admin:
                await admin.create_topic("late")
            async with await Producer.create(broker.address, "late", security=late) as producer:
                await asyncio.wait_for(await producer.send(0, b"0"), WAIT_S)
                deadline = time.monotonic() + WAIT_S
                while ended not in broker.log_path.read_text():
                    assert time.monotonic() < deadline, "the broker did not end the stream"
                    await asyncio.sleep(0.1)
                with pytest.raises(errors.Unauthenticated, match="client certificate expired"):
                    await asyncio.wait_for(await producer.send(1, b"1"), WAIT_S)
                certs.write_pair(setup.directory, "client-late",  # the rotation, late
                                 certs.issue(ca, "root", valid_days=1))
                for key in (2, 3):
                    result = await asyncio.wait_for(await producer.send(key, b"v"), WAIT_S / 3)
                    assert result.offset == key - 1  # 1 was never stored
        asyncio.run(go())
    finally:
        broker.stop()
