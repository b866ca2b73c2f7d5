"""The SDK's error types: one class per broker status code, plus client-side
failures (buffer full, delivery timeout, closed producer).

Every broker error carries the broker's own message (it names the field and
what is allowed) and the gRPC status code number. `from_rpc_error` maps a
grpc.RpcError; `from_code` maps the error fields of a ProduceResponse.
"""

from __future__ import annotations

import re

import grpc

from sdk.core.connect_hints import connection_hint
from sdk.core.error_names import error_name_of
from sdk.core.keepalive import KEEPALIVE_TIMEOUT_MS, unanswered_ping

# google.rpc.Code numbers (equal to grpc.StatusCode values).
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
UNAUTHENTICATED = 16


class KeybusError(Exception):
    """Base of every Keybus SDK error.

    Attributes:
        message: what went wrong (the broker's text for broker errors).
        code: the google.rpc code number, 0 for client-side errors.
        broker_error: the error's name in the broker's catalogue
            ("offset_before_start", "topic_not_found", ...; sdk/core/error_names.py),
            "" for client-side errors and brokers that do not send it.
    """

    code_default = UNKNOWN

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = self.code_default if code is None else code
        self.broker_error = ""

    def __str__(self) -> str:
        return self.message


class InvalidArgument(KeybusError):
    """The broker refused a request field (INVALID_ARGUMENT)."""

    code_default = INVALID_ARGUMENT


class NotFound(KeybusError):
    """A named thing does not exist (NOT_FOUND)."""

    code_default = NOT_FOUND


class TopicNotFound(NotFound):
    """The topic does not exist (NOT_FOUND)."""


class AlreadyExists(KeybusError):
    """The thing to create exists already (ALREADY_EXISTS)."""

    code_default = ALREADY_EXISTS


class ResourceExhausted(KeybusError):
    """A broker limit was hit (RESOURCE_EXHAUSTED); the message names it."""

    code_default = RESOURCE_EXHAUSTED


class FailedPrecondition(KeybusError):
    """The broker's state does not allow the request (FAILED_PRECONDITION)."""

    code_default = FAILED_PRECONDITION


class SequenceError(FailedPrecondition):
    """An idempotent-producer sequence the broker refused: a gap (the
    producer re-sends in order; the application sees it only if that keeps
    failing), a sequence older than the broker remembers, or an unknown
    producer id (the producer gets a new one), or other events stored under
    this chosen id and sequence ("conflict": this batch was not stored)."""

    @property
    def kind(self) -> str:
        """"gap", "too_old", "producer_unknown" or "conflict" (another producer
        stored other events under this id and sequence), judged from the message."""
        lowered = self.message.lower()
        if "another producer is using" in lowered:
            return "conflict"
        if "unknown" in lowered and "initproducer" in lowered:
            return "producer_unknown"
        if "older than" in lowered or "outcome is unknown" in lowered:
            return "too_old"
        return "gap"


class NotLeader(FailedPrecondition):
    """The broker does not lead the topic (relay chaining); `leader` is the
    leader's address from the broker's message ("" when not given)."""

    @property
    def leader(self) -> str:
        match = re.search(r"the leader is (\S+?)\.?(?:\s|$)", self.message)
        return match[1] if match else ""


class ScnNotIncreasing(FailedPrecondition):
    """A producer-supplied SCN is not above the partition's last SCN; the
    window was not stored and is not retried."""


class TopicRecreated(FailedPrecondition):
    """A read is of another incarnation of its topic than the broker holds: the
    topic was deleted and created again while the reader was away (a lost
    connection; Kafka's UNKNOWN_TOPIC_ID). The read's offsets name no event of
    the new topic, so the reader is not reopened on it: read the new topic with
    a new reader, from a start of its own. The message names both incarnations
    (broker error `read_other_incarnation`; for a bootstrap, whose snapshot keys
    and offsets are of the old topic, `bootstrap_other_incarnation`: drop the
    state built from the old topic and bootstrap the new one anew)."""


class OffsetOutOfRange(KeybusError):
    """A start offset outside the stored offsets (OUT_OF_RANGE); the message
    gives the stored range and says whether the offset is past the end or
    before the start (removed by retention). A read also ends with it when
    retention removes offsets it reached while it went on (the broker never
    skips them): the message names them; what came before was handed out."""

    code_default = OUT_OF_RANGE


class PermissionDenied(KeybusError):
    """The caller lacks the right for this topic (PERMISSION_DENIED)."""

    code_default = PERMISSION_DENIED


class Unauthenticated(KeybusError):
    """No valid credentials (UNAUTHENTICATED)."""

    code_default = UNAUTHENTICATED


class Unavailable(KeybusError):
    """The broker cannot be reached or is shutting down (UNAVAILABLE)."""

    code_default = UNAVAILABLE


class BufferFull(KeybusError):
    """The producer's buffer holds buffer_events_max events (client side)."""

    code_default = RESOURCE_EXHAUSTED


class DeliveryTimeout(KeybusError):
    """No answer from the broker within delivery_timeout_ms (client side).
    An event that was sent may or may not be stored."""

    code_default = DEADLINE_EXCEEDED


class ProducerClosed(KeybusError):
    """send() after close(), or events still unsent when close() gave up."""

    code_default = CANCELLED


_BY_CODE: dict[int, type[KeybusError]] = {
    INVALID_ARGUMENT: InvalidArgument,
    NOT_FOUND: NotFound,
    ALREADY_EXISTS: AlreadyExists,
    PERMISSION_DENIED: PermissionDenied,
    RESOURCE_EXHAUSTED: ResourceExhausted,
    FAILED_PRECONDITION: FailedPrecondition,
    OUT_OF_RANGE: OffsetOutOfRange,
    UNAVAILABLE: Unavailable,
    UNAUTHENTICATED: Unauthenticated,
}


def from_code(code: int, message: str) -> KeybusError:
    """The error for a google.rpc code and the broker's message.

    A NOT_FOUND naming a topic is TopicNotFound; a FAILED_PRECONDITION about a
    sequence is SequenceError and one about an SCN is ScnNotIncreasing.
    """
    lowered = message.lower()
    if code == NOT_FOUND and "topic" in lowered:
        return TopicNotFound(message, code)
    if code == FAILED_PRECONDITION:
        if "is not the leader of topic" in lowered:
            return NotLeader(message, code)
        if "sequence" in lowered:
            return SequenceError(message, code)
        if "scn" in lowered:
            return ScnNotIncreasing(message, code)
    return _BY_CODE.get(code, KeybusError)(message, code)


def deleted_if_gone(error: KeybusError, topic: str) -> KeybusError:
    """A reconnecting client's error: the broker's "topic 'T' does not exist; create it
    first" says the topic the client was attached to was deleted meanwhile; it is told
    so, as a stream the delete ends is ("topic 'T' was deleted"). Others as they are."""
    if isinstance(error, TopicNotFound) and \
            error.message.startswith(f"topic {topic!r} does not exist"):
        return TopicNotFound(f"topic {topic!r} was deleted", error.code)
    return error


def from_rpc_error(error: grpc.RpcError, broker: str | None = None) -> KeybusError:
    """Map a grpc.RpcError (or grpc.aio.AioRpcError) to a KeybusError.

    Args:
        broker: the address the client was given; when the call failed because
            no connection could be made, the error names it in the user's words
            (see `unreachable`) instead of gRPC's resolver and socket text.
    """
    code_fn = getattr(error, "code", None)
    details_fn = getattr(error, "details", None)
    status = code_fn() if callable(code_fn) else None
    details = details_fn() if callable(details_fn) else None
    code = status.value[0] if isinstance(status, grpc.StatusCode) else UNKNOWN
    name = status.name if isinstance(status, grpc.StatusCode) else "UNKNOWN"
    hint = connection_hint(details) if details and code in (UNAVAILABLE, UNKNOWN) else None
    if hint is not None:  # a TLS mismatch or a certificate the CA does not verify
        return Unavailable(hint, UNAVAILABLE)
    if code == UNAVAILABLE and broker is not None:
        reason = connection_failure(details or "")
        if reason is not None:
            return unreachable(broker, reason)
    silent = unanswered_ping(details or "") if code == UNAVAILABLE else None
    if silent is not None:  # the connection was open, the broker did not answer
        return Unavailable(f"broker{f' at {broker}' if broker else ''}: {silent}", UNAVAILABLE)
    if code == DEADLINE_EXCEEDED and broker is not None and details == "Deadline Exceeded":
        return KeybusError(f"no answer from the broker at {broker} within the call's deadline "
                           "(request_timeout_ms; --timeout in the CLI)", code)
    mapped = from_code(code, details or f"broker call failed with {name}")
    metadata_fn = getattr(error, "trailing_metadata", None)
    mapped.broker_error = error_name_of(metadata_fn() if callable(metadata_fn) else None)
    if mapped.broker_error in _OTHER_INCARNATION:  # told by name, not by its words
        name = mapped.broker_error
        mapped = TopicRecreated(mapped.message, code)
        mapped.broker_error = name
    return mapped


# The broker's refusals of a read (a log read, a bootstrap) of another incarnation.
_OTHER_INCARNATION = frozenset({"read_other_incarnation", "bootstrap_other_incarnation"})


# A listener that takes the connection and drops it: a TLS port spoken to in
# plain text, or another service on the port.
CLOSED_AT_ONCE = "it closed the connection at once"
# A process that took the TCP connection (the kernel does, for a stopped or hung
# process too) and never answered the HTTP/2 (or TLS) handshake: there, not answering.
ACCEPTED_SILENT = "it accepted the connection but did not answer"

# gRPC's texts for a call that never reached a broker, then the reason in a
# user's words. A stream that was open and broke says something else
# ("Socket closed", "Connection reset by peer"): the broker was there.
_NOT_CONNECTED = ("failed to connect to all addresses", "errors resolving",
                  "dns resolution failed")
_UNANSWERED_PING = (f"{ACCEPTED_SILENT} (a keepalive ping went unanswered for "
                    f"{KEEPALIVE_TIMEOUT_MS / 1000:g} s)")
_REASONS = (
    ("ping timeout", _UNANSWERED_PING),
    ("keepalive watchdog timeout", _UNANSWERED_PING),
    ("connection refused", "connection refused"),
    ("domain name not found", "unknown host"),
    ("name or service not known", "unknown host"),
    ("errors resolving", "unknown host"),
    ("dns resolution failed", "unknown host"),
    ("no route to host", "no route to host"),
    ("network is unreachable", "network is unreachable"),
    ("timeout occurred", "no answer (connect timed out)"),
    ("deadline exceeded", "no answer (connect timed out)"),
    ("socket closed", CLOSED_AT_ONCE),
    ("handshake", CLOSED_AT_ONCE),
)


def connection_failure(details: str) -> str | None:
    """The reason in a user's words when gRPC's `details` say the call never
    reached a broker (refused, unknown host, ...); None otherwise (an answer
    from a broker, or a stream that was open and broke)."""
    lowered = details.lower()
    if not any(marker in lowered for marker in _NOT_CONNECTED):
        return None
    for text, reason in _REASONS:
        if text in lowered:
            return reason
    return "cannot connect"


def unreachable(broker: str, reason: str) -> Unavailable:
    """The one error for a broker that cannot be reached.

    `cannot reach broker at HOST:PORT: connection refused — is it running? (keybus broker)`;
    a broker that took the connection and stayed silent is running, and told apart:
    `the broker at HOST:PORT accepted the connection but did not answer ... — is it
    frozen (stopped) or overloaded?`
    """
    if reason.startswith(ACCEPTED_SILENT):
        return Unavailable(f"the broker at {broker} {reason.removeprefix('it ')} — is it frozen "
                           "(stopped) or overloaded? (a broker not running refuses the "
                           "connection)", UNAVAILABLE)
    hint = ("does it want TLS (--tls-ca), or is another service on that port?"
            if reason == CLOSED_AT_ONCE else "is it running? (keybus broker)")
    return Unavailable(f"cannot reach broker at {broker}: {reason} — {hint}", UNAVAILABLE)
