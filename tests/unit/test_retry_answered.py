"""A message that ends an outage or a slot wait says so once; the messages after it say nothing.

Goal: RetryingCall.read reports what a message ends (a lost or refusing broker
is back, a bootstrap got its slot) only when there is something to report, not
by awaiting the report for every message. These tests pin what that guard must
keep: the end of an outage and of a slot wait is said exactly once, by the first
message after it, however many follow; the first message of a call that is
then lost makes the loss a lost broker (reported), not a broker never reached
(retried in silence); and a link that was never in trouble says nothing.
Method: a scripted call (tests/support/scripted_call.py), the real RetryingCall,
Link and SlotWait; every read bounded.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio

from sdk.retrying_call import RetryingCall
from sdk.slot_wait import SlotWait, SlotWaitPolicy
from tests.support.scripted_call import ScriptedCall, rpc_error

BOUND_S = 5.0
CLOSED = rpc_error(grpc.StatusCode.UNAVAILABLE, "Socket closed")
REFUSED = rpc_error(grpc.StatusCode.UNAVAILABLE,
                    "failed to connect to all addresses; last error: UNKNOWN: "
                    "ipv4:127.0.0.1:7: Failed to connect to remote host: Connection refused")
FULL = rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "the broker serves 1 Bootstrap streams in "
                 "their snapshot or catch-up at once (bootstrap_streams_max); retry later",
                 "too_many_bootstraps")
LOADING = rpc_error(grpc.StatusCode.UNAVAILABLE, "the compacted view of 't'/0 on this follower "
                    "is being loaded from leader:1; retry in a while", "view_loading")


def read_all(script: list[Any]) -> list[str]:
    """What a RetryingCall over `script` (then EOF) gave and said, in order: each
    message, "down"/"up" (on_connection_change(False/True)) and "waits"/"got" (on_slot_wait)."""
    log: list[str] = []
    texts: list[str] = []

    def outage(up: bool, text: str) -> None:
        log.append("up" if up else "down")
        texts.append(text)

    def wait(waiting: bool, text: str) -> None:
        log.append("waits" if waiting else "got")
        texts.append(text)

    call = ScriptedCall([*script, grpc.aio.EOF])
    stream = RetryingCall(call.open, True, 5_000, 1, 2, broker="127.0.0.1:7",
                          connect_timeout_ms=5_000, on_connection_change=outage,
                          slot_wait=SlotWait("t/0", "127.0.0.1:7", SlotWaitPolicy(0, 1, 2)),
                          on_slot_wait=wait)

    async def go() -> None:
        async with asyncio.timeout(BOUND_S):
            while (message := await stream.read()) is not None:
                log.append(message)
    asyncio.run(go())
    assert all(text.startswith(("lost the broker at 127.0.0.1:7 (",
                                "the broker at 127.0.0.1:7 is back after ",
                                "the broker at 127.0.0.1:7 refuses the reconnect: ",
                                "the broker at 127.0.0.1:7 accepts the reconnect after ",
                                "t/0 waits for a bootstrap slot of the broker at 127.0.0.1:7",
                                "t/0 got a bootstrap slot of the broker at 127.0.0.1:7"))
               for text in texts), texts
    return log


def test_the_end_of_an_outage_is_said_once_by_the_first_message_after_it() -> None:
    assert read_all(["m1", CLOSED, REFUSED, REFUSED, "m2", "m3"]) == \
        ["m1", "down", "up", "m2", "m3"]


def test_the_end_of_a_refusal_is_said_once_by_the_first_message_after_it() -> None:
    assert read_all(["m1", LOADING, LOADING, "m2", "m3"]) == ["m1", "down", "up", "m2", "m3"]


def test_a_call_that_answered_once_then_finds_no_broker_has_lost_it() -> None:
    """The first message connects the link: a refused connection after it is a lost
    broker, reported, not a broker never reached (retried in silence)."""
    assert read_all(["m1", REFUSED, "m2", "m3"]) == ["m1", "down", "up", "m2", "m3"]


def test_the_end_of_a_slot_wait_is_said_once_by_the_first_message_after_it() -> None:
    assert read_all([FULL, FULL, "m1", "m2", "m3"]) == ["waits", "got", "m1", "m2", "m3"]


def test_a_slot_wait_during_an_outage_then_another_outage_are_each_said_once() -> None:
    """The refusal for a slot is an answer: it ends the outage before the wait begins."""
    assert read_all(["m1", CLOSED, FULL, "m2", "m3", CLOSED, "m4"]) == \
        ["m1", "down", "up", "waits", "got", "m2", "m3", "down", "up", "m4"]


def test_a_link_never_in_trouble_says_nothing() -> None:
    assert read_all(["m1", "m2", "m3"]) == ["m1", "m2", "m3"]
