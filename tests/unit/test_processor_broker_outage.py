"""The processor's account of a lost broker: one warning, one return.

Goal: `BrokerOutage` says the first sign of a lost broker (a reader's loss or
a cycle that cannot reach it) at WARNING, naming the broker, the partitions
held and what becomes of them; every later sign (other readers, failed
cycles, lapsed claims) at DEBUG; the first answer after it at INFO with how
long, how many cycles failed and which claims lapsed; a loss after a return
is a new outage. `unreachable` tells a broker that did not answer from one
that answered no.
Method: the pure core with time as an argument.
"""

from __future__ import annotations

import logging

from sdk import errors
from sdk.processor.broker_outage import BrokerOutage, unreachable

WHAT = "event processor t/g"
LOST = "lost the broker at b:1 (connection closed); retrying"


def test_one_outage_is_one_warning_then_debug_then_one_info() -> None:
    outage = BrokerOutage(WHAT, "b:1", 2_000)
    first = outage.process_stream_lost(LOST, [1, 0], 10.0)
    assert first.level == logging.WARNING
    assert first.message == (
        f"{WHAT}: {LOST}. Partitions [0, 1] run on until their claims lapse (no renewal "
        "without the broker; ownership_expiration_ms=2000), then close and are balanced "
        "again once it is back; said again only when it is back")
    refused = errors.unreachable("b:1", "connection refused")
    later = [outage.process_stream_lost(LOST, [0, 1], 10.1),
             outage.process_cycle_failed(refused, [0, 1], 10.5),
             outage.process_cycle_failed(refused, [0, 1], 11.0),
             outage.process_lapsed([1, 0])]
    assert [line.level for line in later] == [logging.DEBUG] * 4
    back = outage.process_back(17.5)
    assert back is not None and back.level == logging.INFO
    assert back.message == (
        f"{WHAT}: the broker at b:1 is back after 7.5 s (balancing failed 2 cycles "
        "meanwhile; the claims of partitions [0, 1] lapsed and they closed; they are "
        "balanced again now)")
    assert outage.process_back(18.0) is None  # another reader's return, or the next cycle


def test_a_short_outage_says_no_claim_lapsed_and_a_second_is_said_again() -> None:
    outage = BrokerOutage(WHAT, "b:1", 60_000)
    assert outage.process_back(1.0) is None
    assert outage.process_stream_lost(LOST, [3], 1.0).level == logging.WARNING
    back = outage.process_back(2.0)
    assert back is not None and back.message.endswith("is back after 1.0 s (no claim lapsed)")
    again = outage.process_cycle_failed(errors.Unavailable("gone", errors.UNAVAILABLE), [], 5.0)
    assert again.level == logging.WARNING
    assert again.message == (f"{WHAT}: lost the broker at b:1 (gone); retrying. No partition "
                             "is held; balancing resumes once it is back; said again only "
                             "when it is back")
    back = outage.process_back(6.0)
    assert back is not None and "(balancing failed 1 cycle meanwhile; no claim lapsed)" in \
        back.message


def test_unreachable_is_a_broker_that_did_not_answer() -> None:
    assert unreachable(errors.unreachable("b:1", "connection refused"))
    assert unreachable(TimeoutError())
    assert unreachable(errors.KeybusError("no answer", errors.DEADLINE_EXCEEDED))
    assert not unreachable(errors.TopicNotFound("topic 't' does not exist", errors.NOT_FOUND))
    assert not unreachable(errors.Unauthenticated("bad token", errors.UNAUTHENTICATED))
    assert not unreachable(ConnectionError("redis is away"))
