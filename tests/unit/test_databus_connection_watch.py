"""A Databus consumer's outage in its log: once when it lasts, once when it ends.

Goal: `ConnectionWatch` says a long outage once (WARNING, and one notice for
the consumers), nothing while it lasts, and its end once at INFO (the level
every other SDK client gives a return; it was a second WARNING before).
Method: a fake channel whose connectivity state the test sets; time is an
argument of `check`.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import grpc
import pytest

from sdk import errors
from sdk.databus.connection import ConnectionWatch


class _Channel:
    def __init__(self) -> None:
        self.state = grpc.ChannelConnectivity.READY

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self.state


def test_an_outage_is_said_once_and_its_end_once_at_info(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="keybus.databus")
    channel = _Channel()
    watch = ConnectionWatch(cast(Any, channel), "127.0.0.1:1", report_ms=1_000)
    assert watch.check(0) is None
    channel.state = grpc.ChannelConnectivity.TRANSIENT_FAILURE
    assert watch.check(100) is None  # not yet report_ms down
    notice = watch.check(1_200)
    assert isinstance(notice, errors.Unavailable)
    assert [watch.check(t) for t in range(1_300, 30_000, 1_000)] == [None] * 29
    channel.state = grpc.ChannelConnectivity.READY
    assert watch.check(30_100) is None and watch.check(30_200) is None
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert said == [
        (logging.WARNING, "broker 127.0.0.1:1 unreachable for 1100 ms; reconnecting"),
        (logging.INFO, "broker 127.0.0.1:1 is reachable again; consumption goes on")]
