"""An upstream's failure in a follower's words: what its log line and describe say. Pure.

A follower logs one line per failed attempt, which an operator reads and acts on:

    topic t/0: copy from upstream 127.0.0.1:6650 failed (UNAVAILABLE: connection refused); retry in 400 ms

the upstream's address, the gRPC status code's name and its details, and what
comes next. Never gRPC's own text: `str()` of a `grpc.aio.AioRpcError` is the
several-line `<AioRpcError of RPC that terminated with: status = ...
debug_error_string = "UNKNOWN:Error received from peer ...">`, and its details
for a call that never connected are resolver text (`failed to connect to all
addresses; last error: UNKNOWN: ipv4:127.0.0.1:6650: Failed to connect to
remote host: connect: Connection refused (111)`); both say the same as
`UNAVAILABLE: connection refused`.
"""

from __future__ import annotations

import grpc

from broker.errors import BrokerError
from sdk import errors
from sdk.core.connect_hints import CA_SETTING, CLIENT_CERT_SETTING
from sdk.core.keepalive import unanswered_ping

# The SDK's connection hints name a client's settings; a follower's are in its config.
_RELAY_SETTINGS = ((CA_SETTING, "relay_tls_ca_file in this broker's config"),
                   (CLIENT_CERT_SETTING, "relay_tls_cert_file / relay_tls_key_file"))
_CODE_NAMES: dict[int, str] = {code.value[0]: code.name for code in grpc.StatusCode}


def code_name(error: BaseException) -> str | None:
    """The gRPC status code's name of an error that has one ("UNAVAILABLE"), else None
    (a failure of this broker's own: a write, a corrupt record)."""
    if isinstance(error, grpc.RpcError):
        code_fn = getattr(error, "code", None)
        code = code_fn() if callable(code_fn) else None
        return str(code.name) if isinstance(code, grpc.StatusCode) else "UNKNOWN"
    if isinstance(error, BrokerError):
        return str(error.code.name)
    if isinstance(error, errors.KeybusError) and error.code:
        return _CODE_NAMES.get(error.code, "UNKNOWN")
    return None


def details(error: BaseException) -> str:
    """What the error says, on one line, without gRPC's resolver or debug text."""
    if isinstance(error, grpc.RpcError):
        details_fn = getattr(error, "details", None)
        text = (details_fn() or "") if callable(details_fn) else ""
    else:
        text = str(error)
    reason = errors.connection_failure(text) or unanswered_ping(text)
    if reason is not None:  # gRPC's words for a call that never reached the upstream
        return reason
    first = " ".join(text.split("debug_error_string")[0].split())  # one line
    return first.rstrip(" ,;:") or "no details"


def in_relay_words(error: BaseException) -> str:
    """`CODE: details` ("UNAVAILABLE: connection refused"), or the details alone for
    a failure without a status code; with the relay_tls_* settings where the SDK's
    hint names --tls-ca and the like (a follower's operator acts on those)."""
    name = code_name(error)
    text = details(error)
    if name is not None:
        text = f"{name}: {text}"
    for client, relay in _RELAY_SETTINGS:
        text = text.replace(client, relay)
    return text
