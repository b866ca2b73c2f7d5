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
