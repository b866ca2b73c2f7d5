"""Which certificate files are worth a new channel (sdk/core/certificates.py).

Goal: after the broker ended a stream at its client certificate's notAfter, the SDK
opens a new channel only for a pair that will pass the TLS handshake: valid now and
with its own key. Anything else keeps the old channel, whose reopen fails in the
broker's words ("client certificate expired"), rather than a new one failing its
handshake and being retried as a lost broker.
Method: certificates made with broker/security/certs.py, checked at chosen times.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker.security import certs
from sdk.core.certificates import usable_pair
from sdk.security import ClientSecurity

CA = certs.make_ca()


def test_a_valid_pair_is_usable_only_within_its_validity() -> None:
    now_s = time.time()
    issued = certs.issue(CA, "alice", valid_days=1)
    assert usable_pair(issued.cert_pem, issued.key_pem, now_s)
    assert not usable_pair(issued.cert_pem, issued.key_pem, now_s + 2 * 86_400)  # expired
    assert not usable_pair(issued.cert_pem, issued.key_pem, now_s - 3600)  # not yet valid


def test_a_certificate_with_another_key_or_no_pem_is_not_usable() -> None:
    now_s = time.time()
    new, old = certs.issue(CA, "alice"), certs.issue(CA, "alice")
    assert not usable_pair(new.cert_pem, old.key_pem, now_s)  # a half-done rotation
    assert not usable_pair(b"not a certificate", new.key_pem, now_s)
    assert not usable_pair(new.cert_pem, b"", now_s)


def test_client_security_reads_the_files_as_they_are_now(tmp_path: Path) -> None:
    now_s = time.time()
    security = ClientSecurity(cert_file=str(tmp_path / "c.pem"), key_file=str(tmp_path / "c.key"))
    assert not security.holds_usable_certificate(now_s)  # no files yet
    certs.write_pair(tmp_path, "c", certs.issue(CA, "alice", valid_days=1))
    assert security.holds_usable_certificate(now_s)
    assert not ClientSecurity(token="t" * 16).holds_usable_certificate(now_s)


def test_a_pair_that_cannot_work_is_refused_before_connecting_naming_why(
        tmp_path: Path) -> None:
    # gRPC took these and failed later: a key of another certificate logged C-core
    # errors then read as "the broker closed the connection", an expired certificate
    # as "does it want TLS".
    good, other = certs.issue(CA, "alice"), certs.issue(CA, "alice")
    expired = certs.issue(CA, "alice", valid_days=-0.001)
    certs.write_pair(tmp_path, "good", good)
    certs.write_pair(tmp_path, "other", other)
    certs.write_pair(tmp_path, "expired", expired)
    certs.write_pair(tmp_path, "ca", CA)

    def credentials(cert: str, key: str) -> object:
        return ClientSecurity(ca_file=str(tmp_path / "ca.pem"), cert_file=str(tmp_path / cert),
                              key_file=str(tmp_path / key)).channel_credentials("127.0.0.1")

    assert credentials("good.pem", "good.key") is not None
    with pytest.raises(ValueError, match=r"client certificate cert_file .*good\.pem with key_file "
                       r".*other\.key: key_file holds the key of another certificate"):
        credentials("good.pem", "other.key")
    with pytest.raises(ValueError, match=r"expired\.pem .*: the certificate expired at "
                       r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(its notAfter\); get a new one"):
        credentials("expired.pem", "expired.key")
    with pytest.raises(ValueError, match="key_file is not an unencrypted PEM private key"):
        credentials("good.pem", "good.pem")
    with pytest.raises(ValueError, match="cert_file is not a PEM certificate"):
        credentials("good.key", "good.key")


def test_the_token_stays_out_of_repr() -> None:
    # A ClientSecurity logged (or shown in a traceback's locals) must not carry the secret.
    security = ClientSecurity(ca_file="ca.pem", token="s3cret-token-0123456789")
    assert "s3cret" not in repr(security) and "s3cret" not in str(security)
    assert security.token == "s3cret-token-0123456789"
