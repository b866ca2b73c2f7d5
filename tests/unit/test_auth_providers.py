"""Authentication providers (broker/security/providers.py) and security settings.

Goal: static tokens and JWTs map to principals; a presented bad token is
refused and never passed over for the client certificate; expired, forged
and wrongly keyed JWTs are refused with a reason; bad security settings stop
the broker with a message naming the setting; the broker warns loudly when
open on a non-loopback address. Method: the providers in-process with
pyjwt-made tokens; Settings built directly.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import jwt
import pytest

from broker.config import ConfigError, Settings
from broker.security.providers import (
    EXP_S_MAX,
    AuthenticationError,
    Authenticator,
    Credentials,
    JwtTokens,
    StaticTokens,
    bearer_token,
)
from broker.security.setup import is_loopback, metrics_address, warn_if_open

SECRET = b"a-secret-of-more-than-32-bytes-0123456789"


def tokens_file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "tokens.toml"
    path.write_text(body)
    return str(path)


def test_static_tokens(tmp_path: Path) -> None:
    provider = StaticTokens.from_file(tokens_file(tmp_path, '[tokens]\nalice = "alice-secret-012345"\n'))
    assert provider.principal_of("alice-secret-012345", 0) == "alice"
    assert provider.principal_of("alice-secret-01234", 0) is None


@pytest.mark.parametrize("body, error", [("x = 1", r"needs a \[tokens\] table"),
                                         ('[tokens]\na = "short"', "16 characters")])
def test_bad_token_files_refused(tmp_path: Path, body: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        StaticTokens.from_file(tokens_file(tmp_path, body))


def test_jwt_rules() -> None:
    provider = JwtTokens({"HS256": SECRET}, issuer="keybus-test")
    now = time.time()

    def token(**claims: object) -> str:
        return jwt.encode({"sub": "alice", "exp": int(now + 60), "iss": "keybus-test", **claims},
                          SECRET, algorithm="HS256")
    assert provider.principal_of(token(), now) == "alice"
    assert provider.principal_of("not-a-jwt", now) is None
    for bad, reason in ((token(exp=int(now - 10)), "expired"), (token(iss="other"), "refused"),
                        (token(sub=""), "empty sub"),
                        (jwt.encode({"sub": "a", "exp": int(now + 60)}, SECRET + b"x",
                                    algorithm="HS256"), "does not verify"),
                        (jwt.encode({"sub": "a", "exp": int(now + 60)}, SECRET * 2, algorithm="HS512"),
                         "accepts HS256")):
        with pytest.raises(AuthenticationError, match=reason):
            provider.principal_of(bad, now)
    no_exp = jwt.encode({"sub": "alice", "iss": "keybus-test"}, SECRET, algorithm="HS256")
    with pytest.raises(AuthenticationError, match="exp"):
        provider.principal_of(no_exp, now)


def test_jwt_exp_beyond_a_float_counts_as_year_9999() -> None:
    # An issuer meaning "never" may write any integer: float() of 10**400 overflows,
    # which failed the call UNKNOWN with a traceback in the broker's log.
    tokens = JwtTokens({"HS256": SECRET})
    now = time.time()
    for exp in (10**400, 10**30):
        token = jwt.encode({"sub": "alice", "exp": exp}, SECRET, algorithm="HS256")
        identity = tokens.identify(token, now)
        assert identity is not None and identity.principal == "alice"
        assert identity.expires_s == EXP_S_MAX


def test_a_bad_token_is_not_passed_over_for_the_certificate(tmp_path: Path) -> None:
    provider = StaticTokens.from_file(tokens_file(tmp_path, '[tokens]\nalice = "alice-secret-012345"\n'))
    authenticator = Authenticator((provider,), certificate_principal=True)
    assert authenticator.authenticate(Credentials("", "carol"), 0) == "carol"
    assert authenticator.authenticate(Credentials("alice-secret-012345", "carol"), 0) == "alice"
    with pytest.raises(AuthenticationError, match="not known"):
        authenticator.authenticate(Credentials("wrong-token-0123456", "carol"), 0)
    with pytest.raises(AuthenticationError, match="no credentials"):
        Authenticator((provider,)).authenticate(Credentials(), 0)


def test_bearer_token_from_metadata() -> None:
    assert bearer_token([("authorization", "Bearer abc")]) == "abc"
    assert bearer_token([("authorization", "Basic abc")]) == ""
    assert bearer_token(None) == ""


@pytest.mark.parametrize("fields, error", [
    ({"tls_cert_file": "x"}, "go together"),
    ({"tls_client_ca_file": "x"}, "needs TLS"),
    ({"auth_certificate_principal": True}, "needs tls_client_ca_file"),
    ({"auth_jwt_issuer": "x"}, "need auth_jwt_secret_file"),
    ({"auth_token_file": "/no/such/file"}, "auth_token_file='/no/such/file'"),
])
def test_security_settings_that_cannot_work_stop_the_broker(fields: dict[str, object],
                                                            error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        Settings(**fields)  # type: ignore[arg-type]


def test_open_broker_on_a_public_address_warns_loudly(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "keybus.security"):
        warn_if_open(Settings(host="127.0.0.1"))
        assert not caplog.records
        warn_if_open(Settings(host="0.0.0.0"))
    assert "WITHOUT TLS AND authentication" in caplog.text
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("0.0.0.0")


def test_metrics_endpoint_on_a_public_address_warns_and_can_be_kept_in(
        caplog: pytest.LogCaptureFixture) -> None:
    # /metrics is plain HTTP without authentication and names every topic: with the
    # gRPC port public, metrics_host keeps it on loopback (no warning), else a warning.
    with caplog.at_level(logging.WARNING, "keybus.security"):
        warn_if_open(Settings(host="0.0.0.0", metrics_port=9100, metrics_host="127.0.0.1"))
        assert "/metrics" not in caplog.text
        warn_if_open(Settings(host="0.0.0.0", metrics_port=9100))
    assert "the /metrics endpoint on 0.0.0.0:9100 is plain HTTP without authentication" \
        in caplog.text and 'metrics_host = "127.0.0.1"' in caplog.text
    assert metrics_address(Settings(host="0.0.0.0", metrics_host="127.0.0.1")) == "127.0.0.1"
    assert metrics_address(Settings(host="0.0.0.0")) == "0.0.0.0"
