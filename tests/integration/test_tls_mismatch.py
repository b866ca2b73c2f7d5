"""A client and a broker that disagree about TLS: one clear line, not "Socket closed".

Goal: a plain-text client at a TLS broker, and a TLS client at a plain-text
broker, are told what is probably wrong and which setting fixes it, by the SDK
(an `Unavailable` error) and by the CLI (one line on stderr, exit 1), within
seconds. Method: two real broker processes on 127.0.0.1, one with TLS and
tokens (tests/support/security), one plain; the SDK in this process and
`python -m keybus` as a subprocess.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk import errors
from sdk.admin import Admin
from sdk.producer import Producer
from sdk.security import ClientSecurity
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.security import SecureSetup

CLI_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[SecureSetup, BrokerProcess, BrokerProcess]]:
    root = tmp_path_factory.mktemp("tls-mismatch")
    setup = SecureSetup.make(root / "certs")
    secure = BrokerProcess(root / "secure", *setup.broker_args(jwt_tokens=False))
    plain = BrokerProcess(root / "plain")
    secure.start()
    plain.start()
    yield setup, secure, plain
    secure.stop()
    plain.stop()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    return subprocess.run([sys.executable, "-m", "keybus", *args], capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S, cwd=REPO, env=env)


def test_sdk_says_plain_client_meets_tls_broker(
        brokers: tuple[SecureSetup, BrokerProcess, BrokerProcess]) -> None:
    _, secure, _ = brokers

    async def go() -> None:
        with pytest.raises(errors.Unavailable) as admin_error:
            async with Admin(secure.address, security=ClientSecurity(),
                             request_timeout_ms=10_000) as admin:
                await admin.list_topics()
        with pytest.raises(errors.Unavailable) as producer_error:
            await asyncio.wait_for(Producer.create(secure.address, "t", security=ClientSecurity()),
                                   30)
        for error in (admin_error.value, producer_error.value):
            message = str(error)
            assert f"the broker at {secure.address} closed the connection during the " \
                   "handshake: is it TLS? pass its CA" in message, message

    asyncio.run(go())


def test_sdk_says_tls_client_meets_plain_broker(
        brokers: tuple[SecureSetup, BrokerProcess, BrokerProcess]) -> None:
    setup, _, plain = brokers

    async def go() -> None:
        with pytest.raises(errors.Unavailable) as error:
            async with Admin(plain.address, security=setup.security(),
                             request_timeout_ms=10_000) as admin:
                await admin.list_topics()
        assert f"the broker at {plain.address} answered the TLS handshake in plain text" \
               in str(error.value)

    asyncio.run(go())


def test_cli_one_line_and_exit_1_both_ways(
        brokers: tuple[SecureSetup, BrokerProcess, BrokerProcess]) -> None:
    setup, secure, plain = brokers
    to_tls = _cli("topics", "list", "--broker", secure.address)
    to_plain = _cli("topics", "list", "--broker", plain.address, "--tls-ca", setup.path("ca.pem"))
    for result, expected in ((to_tls, "is it TLS? pass its CA"),
                             (to_plain, "answered the TLS handshake in plain text")):
        assert result.returncode == 1, (result.stdout, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("keybus: error: "), result.stderr
        assert expected in lines[0], result.stderr
