"""A producer with several brokers, none leading: said once, then quiet.

Goal: while the producer has lost its broker (reported once at WARNING), each
retry's "no leader found yet" is DEBUG, not one INFO line per retry; a first
such answer, before anything was lost, stays INFO.
Method: a Sender whose `relocate` (sdk/cluster.py's leader lookup) always
fails as with no broker answering; its stub is never called.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest

from sdk import errors
from sdk.sender import Sender


async def _no_leader() -> Any:
    raise errors.Unavailable("no broker of 127.0.0.1:1,127.0.0.1:2 answers", errors.UNAVAILABLE)


def test_no_leader_found_is_said_once_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="keybus.producer")

    async def go() -> None:
        sender = Sender(cast(Any, None), "t", 1, relocate=_no_leader)
        await sender._find_leader()  # not lost yet: worth an INFO
        sender._lost("connection refused")
        for _ in range(5):
            await sender._find_leader()

    asyncio.run(go())
    levels = [(r.levelno, r.getMessage()[:30]) for r in caplog.records]
    assert levels == [(logging.INFO, "topic 't': no leader found yet"),
                      (logging.WARNING, "producer of topic 't' lost the"),
                      *[(logging.DEBUG, "topic 't': no leader found yet")] * 5]
