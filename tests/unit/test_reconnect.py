"""The link rules of long-running SDK clients (sdk/reconnect.py).

Goal: a broker never reached fails within connect_timeout_ms with the one
"cannot reach broker" sentence; a lost broker is reported once, retried for
retry_timeout_ms (0 = forever) with capped backoff, the last wait cut to end at
either deadline, and its return reported.
Method: drive Link with a fake clock (time is an argument) and gRPC's real
failure texts.
"""

from __future__ import annotations

import grpc
import pytest

from sdk import errors
from sdk.reconnect import Link, RetryPolicy, failure_of, log_connection_change

REFUSED = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
           "Failed to connect to remote host: Connection refused")


def test_never_reached_fails_after_connect_timeout_with_the_one_sentence() -> None:
    link = Link("127.0.0.1:1", RetryPolicy(connect_timeout_ms=1_000, backoff_first_ms=100,
                                           backoff_max_ms=400))
    now, delays = 0, []
    with pytest.raises(errors.Unavailable) as caught:
        while now < 10_000:
            delay, message = link.process_failure("connection refused", True, now)
            assert message is None  # nothing to report: it was never there
            delays.append(delay)
            now += delay
    assert str(caught.value) == ("cannot reach broker at 127.0.0.1:1: connection refused — "
                                 "is it running? (keybus broker)")
    # the last wait is cut to end at the deadline, and the attempt then fails it
    assert delays == [100, 200, 400, 300] and now == 1_000


def test_with_the_defaults_the_last_attempt_is_at_5_s_not_3_1_s() -> None:
    """connect_timeout_ms reads as "keep trying for this long": a broker back at 4.5 s
    is reached by the attempt at 5 s, and one still away fails the call then."""
    link = Link("127.0.0.1:1", RetryPolicy())
    now, attempts = 0, [0]
    with pytest.raises(errors.Unavailable, match=r"cannot reach broker at 127\.0\.0\.1:1"):
        while now < 60_000:
            now += link.process_failure("connection refused", True, now)[0]
            attempts.append(now)
    assert attempts == [0, 100, 300, 700, 1_500, 3_100, 5_000]
    late = Link("b:1", RetryPolicy())
    for now in attempts[:-1]:  # the broker comes up between the last two attempts
        late.process_failure("connection refused", True, now)
    assert late.process_connected(5_000) is None and late.ever_connected


def test_an_attempt_that_ends_past_the_deadline_fails_at_once() -> None:
    """The attempt at the deadline took long to fail (a slow refusal): no wait after it."""
    link = Link("b:1", RetryPolicy(connect_timeout_ms=1_000, backoff_first_ms=600))
    assert link.process_failure("connection refused", True, 0) == (600, None)
    assert link.process_failure("connection refused", True, 600) == (400, None)
    with pytest.raises(errors.Unavailable):
        link.process_failure("connection refused", True, 1_250)


def test_connect_timeout_zero_retries_forever() -> None:
    link = Link("b:1", RetryPolicy(connect_timeout_ms=0))
    for now in range(0, 3_600_000, 60_000):
        assert link.process_failure("connection refused", True, now)[1] is None


def test_lost_broker_is_reported_once_then_back() -> None:
    link = Link("b:6650", RetryPolicy(retry_timeout_ms=0))
    assert link.process_connected(0) is None
    _, message = link.process_failure("connection closed", False, 1_000)
    assert message == "lost the broker at b:6650 (connection closed); retrying"
    for now in range(1_100, 100_000, 1_000):  # refused while it is away: told once only
        assert link.process_failure("connection refused", True, now)[1] is None
    assert link.process_connected(101_000) == "the broker at b:6650 is back after 100.0 s"
    assert link.process_connected(102_000) is None
    assert link.process_failure("connection refused", True, 103_000)[1] is not None


def test_retry_timeout_gives_up_naming_the_setting() -> None:
    link = Link("b:6650", RetryPolicy(retry_timeout_ms=2_000, backoff_max_ms=500))
    link.process_connected(0)
    now, message = link.process_failure("connection closed", False, 0)
    assert message is not None and message.endswith("; retrying for up to 2 s")
    attempts = [0, now]
    with pytest.raises(errors.Unavailable, match=r"did not come back within 2 s "
                                                 r"\(retry_timeout_ms=2000\)"):
        while now < 60_000:
            now += link.process_failure("connection refused", True, now)[0]
            attempts.append(now)
    # as rule 1: the last wait is cut to end at the deadline, and the attempt then fails it
    assert attempts == [0, 100, 300, 700, 1_200, 1_700, 2_000]


def test_a_lost_broker_back_just_before_retry_timeout_is_reached() -> None:
    """retry_timeout_ms reads as "keep trying for this long", as connect_timeout_ms: a
    Reader's defaults (backoff 100..1000 ms) with 5 s made their last attempt at 4.5 s and
    gave up then, so a broker back at 4.8 s was missed; the attempt at 5 s now reaches it."""
    policy = RetryPolicy(retry_timeout_ms=5_000, backoff_first_ms=100, backoff_max_ms=1_000)
    link = Link("b:6650", policy)
    link.process_connected(0)
    now, attempts = 10_000, [10_000]
    now += link.process_failure("connection closed", False, now)[0]
    while now < 14_800:
        attempts.append(now)
        now += link.process_failure("connection refused", True, now)[0]
    attempts.append(now)
    assert attempts == [10_000, 10_100, 10_300, 10_700, 11_500, 12_500, 13_500, 14_500, 15_000]
    assert link.process_connected(15_000) == "the broker at b:6650 is back after 5.0 s"


def test_a_first_wait_longer_than_retry_timeout_is_cut_too() -> None:
    link = Link("b:6650", RetryPolicy(retry_timeout_ms=50, backoff_first_ms=100))
    link.process_connected(0)
    delay, message = link.process_failure("connection closed", False, 0)
    assert delay == 50 and message is not None and message.startswith("lost the broker")
    with pytest.raises(errors.Unavailable, match="retry_timeout_ms=50"):
        link.process_failure("connection refused", True, 50)


def test_a_broker_reached_then_refusing_counts_as_lost_not_unreachable() -> None:
    """A stream that broke proves the broker was there, even before any answer."""
    link = Link("b:6650", RetryPolicy(connect_timeout_ms=100))
    _, message = link.process_failure("connection closed", False, 0)
    assert message is not None and message.startswith("lost the broker")
    for now in range(0, 10_000, 500):
        link.process_failure("connection refused", True, now)  # no connect timeout any more


@pytest.mark.parametrize(("details", "reason"), [
    (REFUSED, "connection refused"),
    ("errors resolving nosuch.invalid:6650: [field:hostname lookup error:address lookup failed "
     "for nosuch.invalid:6650: Domain name not found]", "unknown host"),
    ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:6651: "
     "Timeout occurred: FD Shutdown", "no answer (connect timed out)"),
    ("failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:7: Socket "
     "closed", "it closed the connection at once"),
    ("the broker is shutting down; retry on another broker or later", None),
    ("Socket closed", None),
])
def test_connection_failure_texts(details: str, reason: str | None) -> None:
    assert errors.connection_failure(details) == reason


def test_policy_refuses_bad_values() -> None:
    with pytest.raises(ValueError, match="retry_timeout_ms=-1 is invalid"):
        RetryPolicy(retry_timeout_ms=-1)
    with pytest.raises(ValueError, match="backoff_first_ms=0 is invalid"):
        RetryPolicy(backoff_first_ms=0)


class _Failed(grpc.RpcError):
    """What a failed grpc.aio call raises: a code and gRPC's details."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize(("code", "details", "text"), [
    (grpc.StatusCode.UNAVAILABLE, REFUSED,
     "cannot reach broker at localhost:7: connection refused — is it running? (keybus broker)"),
    (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded",
     "no answer from the broker at localhost:7 within the call's deadline (request_timeout_ms; "
     "--timeout in the CLI)"),
    (grpc.StatusCode.UNAVAILABLE, "the broker is shutting down; retry on another broker or later",
     "the broker is shutting down; retry on another broker or later"),
    # a single call (Admin, the producer's InitProducer) on a connection whose broker froze
    (grpc.StatusCode.UNAVAILABLE, "Stream removed (ping timeout)",
     "broker at localhost:7: no answer to a keepalive ping within 5 s: the broker is frozen, "
     "overloaded or cut off"),
])
def test_rpc_errors_in_users_words(code: grpc.StatusCode, details: str, text: str) -> None:
    error = errors.from_rpc_error(_Failed(code, details), "localhost:7")
    assert str(error) == text and error.code == code.value[0]


@pytest.mark.parametrize("details", ["Stream removed (ping timeout)", "keepalive watchdog timeout"])
def test_an_unanswered_keepalive_ping_is_a_lost_broker_that_says_why(details: str) -> None:
    reason, never_reached = failure_of(_Failed(grpc.StatusCode.UNAVAILABLE, details))
    assert reason == ("no answer to a keepalive ping within 5 s: the broker is frozen, "
                      "overloaded or cut off") and not never_reached


def test_the_default_report_is_a_warning_then_info(caplog: pytest.LogCaptureFixture) -> None:
    """Without on_connection_change, a lost broker is a WARNING (Python prints it even
    when logging is not set up), its return INFO, on `keybus.connection`."""
    with caplog.at_level("INFO", logger="keybus.connection"):
        log_connection_change(False, "lost the broker at 127.0.0.1:1")
        log_connection_change(True, "the broker at 127.0.0.1:1 is back after 1.0 s")
    said = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [("keybus.connection", "WARNING", "lost the broker at 127.0.0.1:1"),
                    ("keybus.connection", "INFO", "the broker at 127.0.0.1:1 is back after 1.0 s")]
