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
import contextlib
import time
from collections.abc import Iterator
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


@contextlib.contextmanager
def _mtls_broker(tmp_path: Path) -> Iterator[tuple[SecureSetup, BrokerProcess, certs.Issued]]:
    """A broker taking mTLS principals that rechecks open streams every 300 ms, and
    the CA that issues its clients' certificates."""
    setup = SecureSetup.make(tmp_path / "tls")
    broker = BrokerProcess(tmp_path / "data", *setup.broker_args(mtls=True),
                           "--auth-recheck-interval-ms", "300")
    broker.start()
    try:
        ca = certs.load_ca(setup.directory)
        assert ca is not None
        yield setup, broker, ca
    finally:
        broker.stop()


def _short_lived(setup: SecureSetup, ca: certs.Issued, name: str,
                 life_s: float) -> ClientSecurity:
    """Files client-NAME.pem/.key holding a certificate naming the superuser, valid
    for life_s from now, and a client that reads them."""
    certs.write_pair(setup.directory, f"client-{name}",
                     certs.issue(ca, "root", valid_days=life_s / 86_400))
    return ClientSecurity(ca_file=setup.path("ca.pem"), cert_file=setup.path(f"client-{name}.pem"),
                          key_file=setup.path(f"client-{name}.key"))


def test_a_stream_opened_with_a_client_certificate_ends_at_its_not_after(
        tmp_path: Path) -> None:
    with _mtls_broker(tmp_path) as (setup, broker, ca):
        brief = _short_lived(setup, ca, "brief", 8)
        alice = setup.security(SUPERUSER, client_cert="alice")

        async def go() -> None:
            async with Admin(broker.address, security=alice) as admin:
                await admin.create_topic("cert")
            async with await Producer.create(broker.address, "cert", security=alice) as producer:
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
    life_s = 10.0
    with _mtls_broker(tmp_path) as (setup, broker, ca):
        rotated = _short_lived(setup, ca, "rotated", life_s)
        expires = time.monotonic() + life_s
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
                await _wait_for_lines(broker, ended, life_s + WAIT_S)
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


def test_a_producer_whose_certificate_expired_before_its_files_were_rotated_recovers(
        tmp_path: Path) -> None:
    """Files rotated late, after the certificate's notAfter: a send meanwhile fails at
    once with the broker's Unauthenticated; once the new files are there the next send
    goes through on a new channel. Before: the producer kept its channel, whose
    connection still held the expired certificate, and retried its InitProducer there
    ("lost the broker ... retrying") until every later send's delivery timeout."""
    with _mtls_broker(tmp_path) as (setup, broker, ca):
        late = _short_lived(setup, ca, "late", 4)
        ended = ["Produce stream of principal 'root' ended: Produce: client certificate expired"]

        async def go() -> None:
            async with Admin(broker.address, security=late) as admin:
                await admin.create_topic("late")
            async with await Producer.create(broker.address, "late", security=late) as producer:
                await asyncio.wait_for(await producer.send(0, b"0"), WAIT_S)
                await _wait_for_lines(broker, ended, WAIT_S)
                with pytest.raises(errors.Unauthenticated, match="client certificate expired"):
                    await asyncio.wait_for(await producer.send(1, b"1"), WAIT_S)
                certs.write_pair(setup.directory, "client-late",  # the rotation, late
                                 certs.issue(ca, "root", valid_days=1))
                for key in (2, 3):
                    result = await asyncio.wait_for(await producer.send(key, b"v"), WAIT_S / 3)
                    assert result.offset == key - 1  # 1 was never stored
        asyncio.run(go())


async def _wait_for_lines(broker: BrokerProcess, lines: list[str], within_s: float) -> None:
    """Until the broker's log holds every line (its streams were ended)."""
    deadline = time.monotonic() + within_s
    while not all(line in broker.log_path.read_text() for line in lines):
        assert time.monotonic() < deadline, "the broker did not end the streams"
        await asyncio.sleep(0.1)
