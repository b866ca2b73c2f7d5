"""The producer's warning names why it lost its broker in a user's words.

A request written while the broker goes away meets a call that has ended under
it: grpcio raises asyncio.InvalidStateError("RPC already finished."), which the
warning printed as is ("lost the broker (RPC already finished.)", seen with a
producer sending every 2 ms through a kill -9). It is the connection closing.
"""

from __future__ import annotations

import asyncio

from sdk.sender import _reason


def test_a_write_on_an_ended_call_is_the_connection_closing() -> None:
    assert _reason(asyncio.InvalidStateError("RPC already finished.")) == "connection closed"


def test_other_failures_keep_their_words() -> None:
    assert _reason(ConnectionResetError("reset by peer")) == "reset by peer"
    assert _reason(RuntimeError()) == "RuntimeError"
