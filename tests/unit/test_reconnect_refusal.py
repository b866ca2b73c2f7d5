"""A reconnect the broker refuses (sdk/reconnect.py, rule 7).

Goal: a broker that is back but refuses a client's reconnect (another consumer
took the Exclusive subscription, the consumer limit, not the leader) is told
once in its own words, distinct from "lost the broker", retried within
retry_timeout_ms, and its end is told; refusals no retry can change end the
client. Method: drive Link with a fake clock and the broker's catalogue errors.
"""

from __future__ import annotations

import pytest

from sdk import errors
from sdk.reconnect import Link, RetryPolicy, refused_for_now

BUSY = ("subscription 's' on topic 't' is Exclusive and consumer 'b' is attached; a second "
        "consumer ('a') is refused. Use type shared, failover or key_shared for several consumers")


def _error(cls: type[errors.KeybusError], message: str, name: str) -> errors.KeybusError:
    error = cls(message)
    error.broker_error = name
    return error


def _busy(holder: str = "b") -> errors.KeybusError:
    return _error(errors.FailedPrecondition, BUSY.replace("'b'", repr(holder)),
                  "exclusive_consumer_busy")


def _lost(link: Link, now_ms: int) -> None:
    link.process_connected(0)
    _, message = link.process_failure("connection closed", False, now_ms)
    assert message is not None and message.startswith(
        "lost the broker at b:6650 (connection closed); retrying")


def test_a_refusal_is_told_once_in_the_brokers_words_then_its_end() -> None:
    link = Link("b:6650", RetryPolicy())
    _lost(link, 1_000)
    assert link.process_failure("connection refused", True, 1_500)[1] is None  # still away
    _, message = link.process_refusal(_busy(), 3_000)
    assert message == f"the broker at b:6650 refuses the reconnect: {BUSY}; retrying"
    for now in range(5_000, 60_000, 2_000):  # told once, not on every attempt
        delay, message = link.process_refusal(_busy(), now)
        assert message is None and delay <= 2_000
    assert link.process_connected(63_000) == ("the broker at b:6650 accepts the reconnect "
                                              "after refusing it for 60.0 s (away 62.0 s in all)")
    assert link.process_connected(64_000) is None


def test_new_words_are_told_again_and_a_broker_gone_again_is_lost_again() -> None:
    link = Link("b:6650", RetryPolicy())
    _lost(link, 0)
    assert link.process_refusal(_busy("b"), 1_000)[1] is not None
    _, message = link.process_refusal(_busy("c"), 2_000)
    assert message is not None and "consumer 'c' is attached" in message
    _, message = link.process_failure("connection refused", True, 3_000)
    assert message == "lost the broker at b:6650 (connection refused); retrying"
    assert link.process_failure("connection refused", True, 4_000)[1] is None
    assert link.process_connected(5_000) == "the broker at b:6650 is back after 5.0 s"


def test_a_refusal_that_may_be_our_own_old_stream_is_told_only_if_it_lasts() -> None:
    link = Link("b:6650", RetryPolicy(backoff_max_ms=2_000))
    link.process_connected(0)  # a stream ended and the broker answered the reconnect at once
    taken = _error(errors.AlreadyExists, "consumer 'a' is already attached to subscription 's' "
                   "on topic 't'; consumer names are unique per subscription",
                   "consumer_name_taken")
    assert link.process_refusal(taken, 1_000, settling=True)[1] is None
    assert link.process_connected(1_200) is None  # nothing was told: nothing to take back
    assert link.process_refusal(taken, 5_000, settling=True)[1] is None
    _, message = link.process_refusal(taken, 7_000, settling=True)
    assert message is not None and message.startswith("the broker at b:6650 refuses the "
                                                      "reconnect: consumer 'a' is already")
    assert link.process_connected(8_000) == ("the broker at b:6650 accepts the reconnect after "
                                             "refusing it for 3.0 s")


def test_retry_timeout_bounds_refusals_with_the_refusals_own_error() -> None:
    link = Link("b:6650", RetryPolicy(retry_timeout_ms=10_000, backoff_max_ms=1_000))
    _lost(link, 0)
    now, attempts = 4_000, [4_000]
    with pytest.raises(errors.FailedPrecondition) as caught:
        while now < 60_000:
            now += link.process_refusal(_busy(), now)[0]
            attempts.append(now)
    # as a lost broker (rule 4): the last wait is cut to end at the deadline (it stopped
    # at 9.4 s of 10), and the refusal of the attempt then ends the client
    assert attempts == [4_000, 4_200, 4_600, 5_400, 6_400, 7_400, 8_400, 9_400, 10_000]
    assert str(caught.value).startswith("the broker at b:6650 refused the reconnect for ")
    assert str(caught.value).endswith(f"retry_timeout_ms=10000 ran out: {BUSY}")
    assert caught.value.broker_error == "exclusive_consumer_busy"


@pytest.mark.parametrize(("error", "retried"), [
    (_busy(), True),
    (_error(errors.AlreadyExists, "consumer 'a' is already attached", "consumer_name_taken"), True),
    (_error(errors.ResourceExhausted, "subscription 's' on topic 't' has 2 consumers, the limit",
            "too_many_consumers"), True),
    (_error(errors.NotLeader, "broker x is not the leader of topic 't'", "not_leader"), True),
    (_error(errors.FailedPrecondition, "busy, from a broker that sends no names", ""), True),
    # the subscription was deleted and made again otherwise: no retry changes that
    (_error(errors.FailedPrecondition, "subscription 's' on topic 't' is SHARED",
            "subscription_type_mismatch"), False),
    (_error(errors.FailedPrecondition, "has max_redeliveries=3", "subscription_setting_mismatch"),
     False),
    (_error(errors.FailedPrecondition, "would close a dead-letter cycle", "dead_letter_cycle"),
     False),
    (_error(errors.InvalidArgument, "bad", "subscribe_limit_invalid"), False),
    (_error(errors.PermissionDenied, "no right to consume", "permission_denied"), False),
    (_error(errors.TopicNotFound, "topic 't' does not exist", "topic_not_found"), False),
])
def test_which_refusals_are_retried(error: errors.KeybusError, retried: bool) -> None:
    assert refused_for_now(error) is retried
