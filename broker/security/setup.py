"""From settings to security objects: TLS credentials, the authenticator, checks.

Runs once at start. A setting that cannot work (a key without its
certificate, mTLS principals without a client CA, a file that cannot be
read) stops the broker with a message naming the setting, like every other
bad setting.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import TYPE_CHECKING

import grpc

from broker.security.acl_store import load_acl_file
from broker.security.providers import Authenticator, JwtTokens, StaticTokens, TokenProvider

if TYPE_CHECKING:
    from broker.config import Settings

log = logging.getLogger("keybus.security")

_FILES = ("tls_cert_file", "tls_key_file", "tls_client_ca_file", "auth_token_file",
          "auth_jwt_secret_file", "auth_jwt_public_key_file", "acl_file")


def check_security_settings(settings: Settings) -> None:
    """Raise ConfigError for security settings that cannot work together."""
    from broker.config import ConfigError

    if bool(settings.tls_cert_file) != bool(settings.tls_key_file):
        raise ConfigError("tls_cert_file and tls_key_file go together: set both for TLS, or "
                          "neither for plain text")
    if settings.tls_client_ca_file and not settings.tls_cert_file:
        raise ConfigError("tls_client_ca_file (mTLS) needs TLS: set tls_cert_file and tls_key_file")
    if settings.auth_certificate_principal and not settings.tls_client_ca_file:
        raise ConfigError("auth_certificate_principal needs tls_client_ca_file: only a verified "
                          "client certificate can name a principal")
    if (settings.auth_jwt_issuer or settings.auth_jwt_audience) and not (
            settings.auth_jwt_secret_file or settings.auth_jwt_public_key_file):
        raise ConfigError("auth_jwt_issuer/auth_jwt_audience need auth_jwt_secret_file or "
                          "auth_jwt_public_key_file")
    for name in _FILES:
        path = getattr(settings, name)
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as e:
                raise ConfigError(f"{name}={path!r}: {e.strerror}") from None
    try:
        if settings.auth_token_file:
            StaticTokens.from_file(settings.auth_token_file)
        if settings.acl_file:
            load_acl_file(settings.acl_file)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def superusers(settings: Settings) -> frozenset[str]:
    return frozenset(p.strip() for p in settings.auth_superusers.split(",") if p.strip())


def auth_enabled(settings: Settings) -> bool:
    return bool(settings.auth_token_file or settings.auth_jwt_secret_file
                or settings.auth_jwt_public_key_file or settings.auth_certificate_principal)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def authenticator(settings: Settings) -> Authenticator:
    """The configured providers (raises ValueError naming a bad file)."""
    providers: list[TokenProvider] = []
    if settings.auth_token_file:
        providers.append(StaticTokens.from_file(settings.auth_token_file))
    keys: dict[str, bytes] = {}
    if settings.auth_jwt_secret_file:
        keys["HS256"] = _read(settings.auth_jwt_secret_file).strip()
    if settings.auth_jwt_public_key_file:
        keys["RS256"] = _read(settings.auth_jwt_public_key_file)
    if keys:
        providers.append(JwtTokens(keys, settings.auth_jwt_issuer, settings.auth_jwt_audience,
                                   settings.auth_jwt_leeway_ms / 1000))
    return Authenticator(tuple(providers), settings.auth_certificate_principal)


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS credentials for the port (None: plain text). mTLS when a client CA is set."""
    if not settings.tls_cert_file:
        return None
    client_ca = _read(settings.tls_client_ca_file) if settings.tls_client_ca_file else None
    return grpc.ssl_server_credentials(
        [(_read(settings.tls_key_file), _read(settings.tls_cert_file))],
        root_certificates=client_ca, require_client_auth=client_ca is not None)


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def metrics_address(settings: Settings) -> str:
    """Where the /metrics endpoint listens: metrics_host, else the gRPC host."""
    return settings.metrics_host or settings.host


def warn_if_open(settings: Settings) -> None:
    """Log loudly when the broker serves a non-loopback address without TLS or
    without authentication: anyone who can reach the port can read, write and
    delete every topic. Warn too when /metrics (never authenticated) is on one."""
    missing = [what for what, on in (("TLS", bool(settings.tls_cert_file)),
                                     ("authentication", auth_enabled(settings))) if not on]
    if missing and not is_loopback(settings.host):
        banner = "!" * 72
        log.warning("\n%s\n  keybus broker listens on %s:%d WITHOUT %s.\n  Anyone who can reach "
                    "this port can produce, read and delete every topic.\n  See docs/security.md "
                    "for the production set-up.\n%s", banner, settings.host, settings.port,
                    " AND ".join(missing), banner)
    metrics_host = metrics_address(settings)
    if settings.metrics_port and not is_loopback(metrics_host):
        log.warning("the /metrics endpoint on %s:%d is plain HTTP without authentication: "
                    "anyone who reaches it reads every topic's and subscription's name and "
                    "rates; set metrics_host = \"127.0.0.1\" (or a private address) to keep it "
                    "in", metrics_host, settings.metrics_port)
    if auth_enabled(settings) and not superusers(settings):
        log.warning("authentication is on but auth_superusers is empty: nobody can change grants "
                    "(grants come from acl_file only)")
