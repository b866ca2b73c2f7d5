"""connection_hint: a TLS mismatch explained in one line (pure).

Goal: the status details gRPC gives for a plain-text client at a TLS broker,
a TLS client at a plain-text broker and a CA that does not verify the broker
each become one line naming the address, the probable cause and the setting
that fixes it; anything else (a broker's own answer, a refused connection)
gets no hint. Method: the details as gRPC 1.6x reports them (captured from
real connections in tests/integration/test_tls_mismatch.py).
"""

from __future__ import annotations

import grpc

from sdk import errors
from sdk.core.connect_hints import connection_hint

PREFIX = "failed to connect to all addresses; last error: "


def test_plain_client_at_tls_broker() -> None:
    hint = connection_hint(PREFIX + "UNAVAILABLE: ipv4:127.0.0.1:43691: Socket closed")
    assert hint is not None and "\n" not in hint
    assert hint.startswith("the broker at 127.0.0.1:43691 closed the connection during the "
                           "handshake: is it TLS? pass its CA")
    assert "--tls-ca" in hint and hint.endswith("(gRPC: Socket closed)")


def test_tls_client_at_plain_broker_and_ipv6_address() -> None:
    hint = connection_hint(PREFIX + "UNKNOWN: ipv6:[::1]:6650: Tls handshake failed "
                           "(TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:100000f7:SSL routines:"
                           "OPENSSL_internal:WRONG_VERSION_NUMBER: Invalid certificate "
                           "verification context: OK" + "x" * 300)
    assert hint is not None and hint.startswith("the broker at [::1]:6650 answered the TLS "
                                                "handshake in plain text")
    assert len(hint) < 500 and hint.endswith("...)")


def test_certificate_the_ca_does_not_verify() -> None:
    hint = connection_hint(PREFIX + "UNKNOWN: ipv4:127.0.0.1:1: Tls handshake failed "
                           "(TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1a000064:ECDSA routines:"
                           "OPENSSL_internal:BAD_SIGNATURE: certificate signature failure")
    assert hint is not None and "presented a certificate that the CA bundle" in hint


def test_no_hint_for_other_failures() -> None:
    assert connection_hint(PREFIX + "UNAVAILABLE: ipv4:127.0.0.1:9: Connection refused") is None
    assert connection_hint("topic 'x' does not exist; create it first") is None
    assert connection_hint("the broker at x closed the stream: Socket closed") is None


class _Status(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def test_from_rpc_error_carries_the_hint_as_unavailable() -> None:
    error = errors.from_rpc_error(_Status(grpc.StatusCode.UNKNOWN, PREFIX + "UNKNOWN: "
                                          "ipv4:127.0.0.1:5: Tls handshake failed: "
                                          "WRONG_VERSION_NUMBER"))
    assert isinstance(error, errors.Unavailable) and "does not use TLS" in str(error)
    plain = errors.from_rpc_error(_Status(grpc.StatusCode.UNAVAILABLE, "the broker is shutting "
                                          "down; retry on another broker or later"))
    assert str(plain) == "the broker is shutting down; retry on another broker or later"


def test_certificate_not_issued_for_the_name_connected_to() -> None:
    hint = connection_hint(PREFIX + "UNKNOWN: ipv4:127.0.0.1:28855: Custom verification check "
                           "failed with error: UNAUTHENTICATED: Hostname Verification Check "
                           "failed.")
    assert hint is not None and hint.startswith(
        "the broker at 127.0.0.1:28855 presented a certificate that the CA bundle given does not "
        "verify (another CA, or a name it is not issued for): here the name, it is not issued "
        "for the host connected to (or the server_name= / --tls-server-name given); connect by "
        "a name it is issued for, or give one as server_name= / --tls-server-name")
    assert hint.endswith("Hostname Verification Check failed.)")


def test_expired_broker_certificate_says_expired_not_another_ca() -> None:
    # Detail captured from a CLI at a broker serving a certificate past its notAfter.
    hint = connection_hint(PREFIX + "UNKNOWN: ipv4:127.0.0.1:32204: Tls handshake failed "
                           "(TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL routines:"
                           "OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: certificate has expired: OK")
    assert hint is not None and hint.startswith(
        "the broker at 127.0.0.1:32204 presented a certificate that has expired (its notAfter "
        "has passed)")
    assert "another CA" not in hint and "renews it" in hint


def test_not_yet_valid_broker_certificate() -> None:
    hint = connection_hint(PREFIX + "UNKNOWN: ipv4:127.0.0.1:1: Tls handshake failed "
                           "(TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL routines:"
                           "OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: certificate is not yet "
                           "valid: OK")
    assert hint is not None and "is not valid yet" in hint and "clocks" in hint
