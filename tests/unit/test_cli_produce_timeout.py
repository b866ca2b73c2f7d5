"""`keybus produce --timeout` bounds the whole delivery (keybus/cli/produce.py,
and keybus/cli/produce_typed.py for lines typed in a terminal).

Goal: a produce the broker keeps refusing with a retriable error (a leader
short of followers, a broker going away) ends within --timeout (30 s by
default), not after the SDK's 120 s delivery timeout with nothing said; piped
or typed alike (a typed line once waited the 120 s whatever --timeout said).
Method: the producer the command creates is a small fake that records the
settings it was given.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from keybus.cli import produce, produce_typed
from keybus.cli.common import Connection


class Created(Exception):
    """Raised by the fake instead of connecting: the settings were recorded."""


@pytest.mark.parametrize("timeout_s, expected_ms", [(None, 30_000), (2.5, 2_500)])
def test_the_delivery_timeout_is_the_command_s_timeout(
        monkeypatch: pytest.MonkeyPatch, timeout_s: float | None, expected_ms: int) -> None:
    given: dict[str, Any] = {}

    async def create(broker: str, topic: str, **options: Any) -> None:
        given.update(options)
        raise Created

    monkeypatch.setattr(produce.Producer, "create", create)
    with pytest.raises(Created):
        asyncio.run(produce.produce_events(Connection("127.0.0.1:1", timeout_s), "t", [],
                                           None, False, None, lambda _: None))
    assert given["request_timeout_ms"] == expected_ms
    assert given["delivery_timeout_ms"] == expected_ms


@pytest.mark.parametrize("timeout_s, expected_ms", [(None, 30_000), (2.5, 2_500)])
def test_a_typed_line_s_delivery_timeout_is_the_command_s_timeout(
        monkeypatch: pytest.MonkeyPatch, timeout_s: float | None, expected_ms: int) -> None:
    given: dict[str, Any] = {}

    async def create(broker: str, topic: str, **options: Any) -> None:
        given.update(options)
        raise Created

    monkeypatch.setattr(produce_typed.Producer, "create", create)
    with pytest.raises(Created):
        asyncio.run(produce_typed.produce_typed(Connection("127.0.0.1:1", timeout_s), "t",
                                                None, False, 1_048_576))
    assert given["request_timeout_ms"] == expected_ms
    assert given.get("delivery_timeout_ms") == expected_ms
