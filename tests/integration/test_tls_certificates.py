"""Certificates that cannot work: one clear line within seconds, not a TLS riddle.

Goal: a broker serving an expired certificate is reported as expired (not as
"another CA"), and a client certificate that cannot work (expired, or given
with another certificate's key) is refused before connecting, naming the
files and the flags, by the SDK (ValueError) and the CLI (one line, exit 2,
none of gRPC's C-core lines); options that go together are named as flags.
Method: real broker processes on 127.0.0.1 (one with an expired certificate,
one with mTLS), certificates from broker/security/certs.py, the SDK's Admin in
this process and `python -m keybus` as a subprocess.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.security import certs
from sdk import errors
from sdk.admin import Admin
from sdk.security import ClientSecurity
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.security import SUPERUSER, TOKENS, SecureSetup

CLI_TIMEOUT_S = 60
PROMPT_S = 30  # generous: 2 shared cores; the answers come in about 2 s


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[SecureSetup, BrokerProcess, BrokerProcess]]:
    root = tmp_path_factory.mktemp("tls-certificates")
    setup = SecureSetup.make(root / "certs")
    ca = certs.Issued(Path(setup.path("ca.pem")).read_bytes(),
                      Path(setup.path("ca.key")).read_bytes())
    certs.write_pair(setup.directory, "expired-server", certs.issue(
        ca, "localhost", server_names=("localhost", "127.0.0.1"), valid_days=-0.001))
    certs.write_pair(setup.directory, "client-expired", certs.issue(ca, "alice",
                                                                    valid_days=-0.001))
    expired = BrokerProcess(root / "expired", "--tls-cert-file", setup.path("expired-server.pem"),
                            "--tls-key-file", setup.path("expired-server.key"),
                            "--auth-token-file", setup.path("tokens.toml"),
                            "--auth-superusers", SUPERUSER)
    mtls = BrokerProcess(root / "mtls", *setup.broker_args(mtls=True, jwt_tokens=False))
    expired.start()
    mtls.start()
    yield setup, expired, mtls
    expired.stop()
    mtls.stop()


def _cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    began = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "keybus", "topics", "list", *args],
                            capture_output=True, text=True, timeout=CLI_TIMEOUT_S, cwd=REPO,
                            env=env)
    return result, time.monotonic() - began


def _one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("keybus: error: "), result.stderr
    return lines[0]


def test_broker_certificate_expired_is_said(
        brokers: tuple[SecureSetup, BrokerProcess, BrokerProcess]) -> None:
    setup, expired, _ = brokers
    result, took_s = _cli("--broker", expired.address, "--tls-ca", setup.path("ca.pem"))
    line = _one_line(result, 1)
    assert f"the broker at {expired.address} presented a certificate that has expired" in line
    assert "another CA" not in line and took_s < PROMPT_S

    async def go() -> None:
        with pytest.raises(errors.Unavailable, match="presented a certificate that has expired"):
            async with Admin(expired.address, security=setup.security(SUPERUSER),
                             request_timeout_ms=10_000) as admin:
                await admin.list_topics()

    asyncio.run(go())


@pytest.mark.parametrize("cert, key, expected", [
    ("client-alice", "client-mallory", "--tls-key holds the key of another certificate"),
    ("client-expired", "client-expired", "the certificate expired at "),
])
def test_client_certificate_that_cannot_work_is_refused_before_connecting(
        brokers: tuple[SecureSetup, BrokerProcess, BrokerProcess], cert: str, key: str,
        expected: str) -> None:
    setup, _, mtls = brokers
    cert_path, key_path = setup.path(f"{cert}.pem"), setup.path(f"{key}.key")
    result, took_s = _cli("--broker", mtls.address, "--tls-ca", setup.path("ca.pem"),
                          "--tls-cert", cert_path, "--tls-key", key_path)
    line = _one_line(result, 2)  # no "E1207 ... Invalid private key." lines of gRPC's
    assert f"client certificate --tls-cert {cert_path} with --tls-key {key_path}: " in line
    assert expected in line and took_s < PROMPT_S
    security = ClientSecurity(ca_file=setup.path("ca.pem"), cert_file=cert_path,
                              key_file=key_path)

    async def go() -> None:
        with pytest.raises(ValueError, match=f"client certificate cert_file {cert_path}"):
            async with Admin(mtls.address, security=security, request_timeout_ms=10_000) as admin:
                await admin.list_topics()

    asyncio.run(go())


def test_cli_names_its_own_flags_for_options_that_go_together(
        brokers: tuple[SecureSetup, BrokerProcess, BrokerProcess], tmp_path: Path) -> None:
    setup, _, mtls = brokers
    token_file = tmp_path / "token"
    token_file.write_text(TOKENS[SUPERUSER])
    both, _ = _cli("--broker", mtls.address, "--tls-ca", setup.path("ca.pem"),
                   "--token", TOKENS[SUPERUSER], "--token-file", str(token_file))
    line = _one_line(both, 2)
    assert "give --token or --token-file" in line and TOKENS[SUPERUSER] not in line
    half, _ = _cli("--broker", mtls.address, "--tls-ca", setup.path("ca.pem"),
                   "--tls-cert", setup.path("client-alice.pem"))
    assert "give --tls-cert and --tls-key together" in _one_line(half, 2)
    working, _ = _cli("--broker", mtls.address, "--tls-ca", setup.path("ca.pem"),
                      "--tls-cert", setup.path("client-alice.pem"),
                      "--tls-key", setup.path("client-alice.key"))
    assert working.returncode == 0, working.stderr
