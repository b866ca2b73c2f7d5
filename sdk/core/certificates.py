"""Whether a client certificate and its key, as PEM bytes, can be used at a given time.

Why the SDK asks: the broker ends a stream authenticated by a client
certificate at its notAfter, and refuses every new call on a connection that
still carries it. A rotated certificate reaches the broker only on a new
channel, and a new channel should only be opened for a pair that will pass the
TLS handshake: one that is valid now and whose key matches it (a half-written
rotation, the certificate new and the key old, would fail every handshake).

Pure: bytes and a time in, a bool out (parsing with `cryptography`).
"""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives import serialization


def usable_pair(cert_pem: bytes, key_pem: bytes, now_s: float) -> bool:
    """True when `cert_pem` is valid at `now_s` (notBefore <= now < notAfter) and
    `key_pem` (unencrypted) is its private key; False for anything that does not parse."""
    try:
        certificate = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    now = datetime.datetime.fromtimestamp(now_s, datetime.UTC)
    if not certificate.not_valid_before_utc <= now < certificate.not_valid_after_utc:
        return False
    public = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(key.public_key().public_bytes(*public) ==
                certificate.public_key().public_bytes(*public))
