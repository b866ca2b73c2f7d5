"""Whether a client certificate and its key, as PEM bytes, can be used at a given time.

Why the SDK asks: the broker ends a stream authenticated by a client
certificate at its notAfter, and refuses every new call on a connection that
still carries it. A rotated certificate reaches the broker only on a new
channel, and a new channel should only be opened for a pair that will pass the
TLS handshake: one that is valid now and whose key matches it (a half-written
rotation, the certificate new and the key old, would fail every handshake).

Pure: bytes and a time in, a bool (or the reason it is not usable) out
(parsing with `cryptography`).
"""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives import serialization


def usable_pair(cert_pem: bytes, key_pem: bytes, now_s: float) -> bool:
    """True when `cert_pem` is valid at `now_s` (notBefore <= now < notAfter) and
    `key_pem` (unencrypted) is its private key; False for anything that does not parse."""
    return pair_problem(cert_pem, key_pem, now_s) is None


def pair_problem(cert_pem: bytes, key_pem: bytes, now_s: float,
                 names: tuple[str, str] = ("cert_file", "key_file")) -> str | None:
    """Why a client certificate and key cannot be used at `now_s`, or None when they can.

    Why the words: gRPC takes any pair and fails later in ways that mislead; a key
    of another certificate logs C-core errors and reads as a broker that closed
    the connection, an expired certificate as a broker that wants TLS. The
    reason names what to fix; `names` are the settings that gave the two files
    (the CLI's are --tls-cert and --tls-key).
    """
    cert_name, key_name = names
    try:
        certificate = x509.load_pem_x509_certificate(cert_pem)
    except (ValueError, TypeError):
        return f"{cert_name} is not a PEM certificate"
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return f"{key_name} is not an unencrypted PEM private key"
    now = datetime.datetime.fromtimestamp(now_s, datetime.UTC)
    if now >= certificate.not_valid_after_utc:
        return (f"the certificate expired at {certificate.not_valid_after_utc:%Y-%m-%d %H:%M:%S} "
                "UTC (its notAfter); get a new one")
    if now < certificate.not_valid_before_utc:
        return (f"the certificate is not valid before "
                f"{certificate.not_valid_before_utc:%Y-%m-%d %H:%M:%S} UTC (its notBefore); "
                "check this machine's clock")
    public = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*public) != certificate.public_key().public_bytes(*public):
        return (f"{key_name} holds the key of another certificate (a rotation half done?); "
                "give the certificate with its own key")
    return None
