"""A Bootstrap refused for want of a broker slot waits in the SDK's stream, as a wait.

Goal: every bootstrap reads through RetryingCall (sdk/retrying_call.py). A
refusal named `too_many_bootstraps` is now asked again with backoff and said
through `on_slot_wait` (waiting, then got one), never through
`on_connection_change`, which tells an application its broker was lost; before,
the stream raised ResourceExhausted at once and every caller above had to
wait itself. Another RESOURCE_EXHAUSTED still ends the read at once; a call
closed (cancel(), as Reader.close does) while it waits is not opened again.
Method: a scripted call that answers as grpc.aio does (AioRpcError with the
error's name in the trailing metadata, as the broker sends it;
tests/support/scripted_call.py), the real RetryingCall and SlotWait; bounded.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from sdk import errors
from sdk.retrying_call import RetryingCall
from sdk.slot_wait import SlotWait, SlotWaitPolicy
from tests.support.scripted_call import ScriptedCall, rpc_error

BOUND_S = 5.0
FULL = rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "the broker serves 1 Bootstrap streams in "
                 "their snapshot or catch-up at once (bootstrap_streams_max); retry later",
                 "too_many_bootstraps")


def stream_of(answers: ScriptedCall, outage: list[tuple[bool, str]],
              waits: list[tuple[bool, str]], timeout_ms: int = 0) -> RetryingCall:
    return RetryingCall(answers.open, True, None, 1, 2, broker="127.0.0.1:7",
                        on_connection_change=lambda up, text: outage.append((up, text)),
                        slot_wait=SlotWait("t/0", "127.0.0.1:7",
                                           SlotWaitPolicy(timeout_ms, 1, 2)),
                        on_slot_wait=lambda waiting, text: waits.append((waiting, text)))


def test_a_refusal_for_want_of_a_slot_waits_and_is_no_outage() -> None:
    outage: list[tuple[bool, str]] = []
    waits: list[tuple[bool, str]] = []
    answers = ScriptedCall([FULL, FULL, FULL, "snapshot"])

    async def go() -> Any:
        return await asyncio.wait_for(stream_of(answers, outage, waits).read(), BOUND_S)

    assert asyncio.run(go()) == "snapshot"
    assert answers.opened == 4
    assert outage == []
    assert [waiting for waiting, _ in waits] == [True, False]
    assert waits[0][1].startswith("t/0 waits for a bootstrap slot of the broker at 127.0.0.1:7")
    assert waits[1][1].startswith("t/0 got a bootstrap slot of the broker at 127.0.0.1:7 after")


def test_the_default_report_is_a_warning_then_info(caplog: pytest.LogCaptureFixture) -> None:
    answers = ScriptedCall([FULL, "snapshot"])

    async def go() -> Any:
        stream = RetryingCall(answers.open, True, None, 1, 2, broker="127.0.0.1:7",
                              slot_wait=SlotWait("t/0", "127.0.0.1:7", SlotWaitPolicy(0, 1, 2)))
        return await asyncio.wait_for(stream.read(), BOUND_S)

    with caplog.at_level("INFO", logger="keybus.bootstrap"):
        assert asyncio.run(go()) == "snapshot"
    said = [(r.name, r.levelname, r.getMessage()[:40]) for r in caplog.records]
    assert said == [("keybus.bootstrap", "WARNING", "t/0 waits for a bootstrap slot of the br"),
                    ("keybus.bootstrap", "INFO", "t/0 got a bootstrap slot of the broker a")]


def test_another_limit_ends_the_read_at_once() -> None:
    answers = ScriptedCall([rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                  "the subscription has 8 consumers", "too_many_consumers"),
                        "never"])

    async def go() -> Any:
        return await asyncio.wait_for(stream_of(answers, [], []).read(), BOUND_S)

    with pytest.raises(errors.ResourceExhausted, match="8 consumers"):
        asyncio.run(go())
    assert answers.opened == 1


def test_a_bounded_wait_ends_with_the_brokers_error() -> None:
    answers = ScriptedCall([FULL])

    async def go() -> Any:
        return await asyncio.wait_for(stream_of(answers, [], [], timeout_ms=30).read(), BOUND_S)

    with pytest.raises(errors.ResourceExhausted, match="slot_wait_timeout_ms=30 ran out") \
            as caught:
        asyncio.run(go())
    assert caught.value.broker_error == "too_many_bootstraps"


def test_a_call_closed_while_it_waits_ends_and_is_not_opened_again() -> None:
    answers = ScriptedCall([FULL])
    waits: list[tuple[bool, str]] = []

    async def go() -> Any:
        stream = stream_of(answers, [], waits)
        reading = asyncio.create_task(stream.read())
        while not waits:
            assert not reading.done(), reading.result()
            await asyncio.sleep(0.001)
        stream.cancel()  # as Reader.close() does, from another task
        result = await asyncio.wait_for(reading, BOUND_S)
        opened = answers.opened
        await asyncio.sleep(0.05)
        return result, opened

    result, opened = asyncio.run(go())
    assert result is None
    assert answers.opened == opened  # nothing opened after the close
