"""What a failed connection probably means, in words a user can act on.

gRPC reports a TLS mismatch as transport noise: a plain-text client that
reaches a TLS broker gets "Socket closed" (the broker drops a connection that
does not start with a TLS hello; an mTLS broker does the same to a TLS client
without a certificate); a TLS client that reaches a plain-text broker gets
"Tls handshake failed ... WRONG_VERSION_NUMBER"; a CA that does not verify the
broker's certificate gives a handshake failure naming a certificate or
signature, a certificate out of its validity period "CERTIFICATE_VERIFY_FAILED:
certificate has expired" (or "... is not yet valid"), and a certificate not
issued for the name connected to "Custom verification check failed ...
Hostname Verification Check failed".
`connection_hint` turns such a status detail into one line naming the
address, the likely cause and the setting that fixes it.

Rules: pure (text in, text out); only connection failures get a hint, never a
broker's own answer; a hint says "probably" where the detail is ambiguous
("Socket closed" is also what a broker killed mid-handshake gives).
"""

from __future__ import annotations

import re

# "...last error: UNAVAILABLE: ipv4:127.0.0.1:43691: Socket closed"
_PEER = re.compile(r"\bipv[46]:(\S+?):\s+(.*)$", re.DOTALL)
DETAIL_CHARS_MAX = 160
CA_SETTING = "security=ClientSecurity(ca_file=...), or --tls-ca / KEYBUS_TLS_CA"
CLIENT_CERT_SETTING = "cert_file/key_file, --tls-cert/--tls-key"


def connection_hint(details: str) -> str | None:
    """One line explaining a failed connection, or None when `details` is not one.

    Args:
        details: a gRPC status detail (e.g. "failed to connect to all
            addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:6650: Socket closed").
    Returns:
        The hint with the original detail (shortened) at its end, or None.
    """
    if "failed to connect" not in details:
        return None
    match = _PEER.search(details)
    address = match.group(1) if match else "the address given"
    detail = (match.group(2) if match else details).strip().replace("\n", " ")
    hint = _hint_for(detail, address)  # from the whole detail: the reason may come last
    if len(detail) > DETAIL_CHARS_MAX:
        detail = detail[:DETAIL_CHARS_MAX - 3] + "..."
    return None if hint is None else f"{hint} (gRPC: {detail})"


def _hint_for(detail: str, address: str) -> str | None:
    lowered = detail.lower()
    if "wrong_version_number" in lowered or "http_request" in lowered:
        return (f"the broker at {address} answered the TLS handshake in plain text: it does not "
                "use TLS; connect without a CA (drop security= / --tls-ca), or use the port "
                "its TLS listener is on")
    validity = _validity(lowered)
    if validity is not None:
        return (f"the broker at {address} presented a certificate that {validity}: its CA and "
                "name check out, but no client accepts it now; the broker's operator renews it "
                "(keybus certs, or your CA), or if it should be valid, check both clocks")
    if "handshake failed" in lowered and ("certificate" in lowered or "signature" in lowered):
        return (f"the broker at {address} presented a certificate that the CA bundle given does "
                "not verify (another CA, or a name it is not issued for): pass the CA that "
                "signed it, and server_name= / --tls-server-name if you connect by another name")
    if "hostname verification" in lowered:
        return (f"the broker at {address} presented a certificate that the CA bundle given does "
                "not verify (another CA, or a name it is not issued for): here the name, it is "
                "not issued for the host connected to (or the server_name= / --tls-server-name "
                "given); connect by a name it is issued for, or give one as server_name= / "
                "--tls-server-name")
    if "socket closed" in lowered:
        return (f"the broker at {address} closed the connection during the handshake: is it "
                f"TLS? pass its CA ({CA_SETTING}); if you already do, it probably requires a "
                f"client certificate (mTLS: {CLIENT_CERT_SETTING})")
    return None


def _validity(lowered: str) -> str | None:
    """How the broker's certificate is out of its validity period, from OpenSSL's
    verify reason (BoringSSL words it as OpenSSL does), or None when it is not."""
    if "certificate has expired" in lowered:
        return "has expired (its notAfter has passed)"
    if "certificate is not yet valid" in lowered:
        return "is not valid yet (its notBefore is in the future)"
    return None
