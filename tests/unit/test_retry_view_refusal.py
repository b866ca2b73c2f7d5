"""A read refused because the broker's compacted view is not ready is no lost broker.

Goal: a Bootstrap (or any read through RetryingCall) that the broker answers
UNAVAILABLE with a named view error was reported as "lost the broker at X (...)
and it did not come back", and `view_incomplete` was retried for ever although no
retry serves it. Now a view that is loading or folding again is a refusal for now
(rule 7 of sdk/reconnect.py): said once in the broker's words, retried within
retry_timeout_ms, and its end said; a view that lacks keys ends the read at once
with the broker's error.
Method: a scripted call that answers as grpc.aio does (AioRpcError with the error's
name in the trailing metadata, as the broker sends it; tests/support/scripted_call.py),
the real RetryingCall; bounded.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from sdk import errors
from sdk.retrying_call import RetryingCall
from tests.support.scripted_call import ScriptedCall, rpc_error

LOADING = rpc_error(grpc.StatusCode.UNAVAILABLE, "the compacted view of 't'/0 on this follower "
                    "is being loaded from leader:1; retry in a while, or bootstrap from the "
                    "leader", "view_loading")


def test_a_view_not_ready_is_a_refusal_said_once_and_its_end_said() -> None:
    said: list[tuple[bool, str]] = []
    answers = ScriptedCall([LOADING, LOADING, "snapshot"])

    async def go() -> Any:
        stream = RetryingCall(answers.open, True, 5_000, 1, 2, broker="127.0.0.1:7",
                              on_connection_change=lambda up, text: said.append((up, text)))
        return await asyncio.wait_for(stream.read(), 5)

    assert asyncio.run(go()) == "snapshot"
    assert answers.opened == 3
    assert [up for up, _ in said] == [False, True]
    assert said[0][1].startswith("the broker at 127.0.0.1:7 refuses the reconnect: the "
                                 "compacted view of 't'/0 on this follower is being loaded")
    assert "lost the broker" not in said[0][1]
    assert said[1][1].startswith("the broker at 127.0.0.1:7 accepts the reconnect after "
                                 "refusing it")


def test_a_view_not_ready_past_retry_timeout_fails_with_the_brokers_words() -> None:
    answers = ScriptedCall([rpc_error(grpc.StatusCode.UNAVAILABLE, "the compacted view ... is "
                                      "being folded again", "view_rebuilding")])

    async def go() -> Any:
        stream = RetryingCall(answers.open, True, 20, 5, 5, broker="127.0.0.1:7",
                              on_connection_change=lambda up, text: None)
        return await asyncio.wait_for(stream.read(), 5)

    with pytest.raises(errors.Unavailable, match=r"refused the reconnect .* being folded"):
        asyncio.run(go())


def test_a_view_that_lacks_keys_ends_the_read_at_once() -> None:
    answers = ScriptedCall([rpc_error(grpc.StatusCode.UNAVAILABLE, "the compacted view of 't'/0 "
                                      "lacks every key written only below offset 240",
                                      "view_incomplete"), "never"])

    async def go() -> Any:
        stream = RetryingCall(answers.open, True, None, 1, 2, broker="127.0.0.1:7",
                              on_connection_change=lambda up, text: None)
        return await asyncio.wait_for(stream.read(), 5)

    with pytest.raises(errors.Unavailable, match="below offset 240") as caught:
        asyncio.run(go())
    assert caught.value.broker_error == "view_incomplete"
    assert answers.opened == 1
