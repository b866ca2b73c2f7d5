"""A Databus registration's outage: once when it begins, once when it ends.

Goal: `ConnectionWatch` reports a long outage once (and one notice for the
consumers), nothing while it lasts, and its end once; `LinkOutage` folds the
watch's and every stream's reports of one broker into one loss (WARNING)
and one return (INFO), the rest at DEBUG, and a loss after a return is a new
outage; `BrokerLink` hands only those two to an application's
on_connection_change, in the SDK's own words.
Method: a fake channel whose connectivity state the test sets; time is an
argument of `check`; the link's callback is a list.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import grpc
import pytest

from sdk import errors
from sdk.databus.config import DatabusConfig
from sdk.databus.connection import BrokerLink, ConnectionWatch
from sdk.databus.outage import LinkOutage


class _Channel:
    def __init__(self) -> None:
        self.state = grpc.ChannelConnectivity.READY

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self.state


def test_the_watch_says_an_outage_once_and_its_end_once() -> None:
    said: list[tuple[bool, str]] = []
    channel = _Channel()
    watch = ConnectionWatch(cast(Any, channel), "127.0.0.1:1", report_ms=1_000,
                            say=lambda connected, message: said.append((connected, message)))
    assert watch.check(0) is None
    channel.state = grpc.ChannelConnectivity.TRANSIENT_FAILURE
    assert watch.check(100) is None  # not yet report_ms down
    notice = watch.check(1_200)
    assert isinstance(notice, errors.Unavailable)
    assert [watch.check(t) for t in range(1_300, 30_000, 1_000)] == [None] * 29
    channel.state = grpc.ChannelConnectivity.READY
    assert watch.check(30_100) is None and watch.check(30_200) is None
    assert said == [(False, "lost the broker at 127.0.0.1:1 (unreachable for 1100 ms); retrying"),
                    (True, "the broker at 127.0.0.1:1 is back after 30.0 s")]


def test_many_reports_of_one_outage_are_one_loss_and_one_return() -> None:
    outage = LinkOutage("reg")
    outage.process_reached()  # the registration started: its first call was answered
    lost = [outage.process_lost(f"lost the broker at b (stream {i}); retrying") for i in range(3)]
    assert [s.level for s in lost] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert lost[0].line == ("reg: lost the broker at b (stream 0); retrying; windows resume "
                            "where they stopped")
    assert lost[0].message == "lost the broker at b (stream 0); retrying"
    back = [outage.process_back("the broker at b is back after 2.0 s") for _ in range(3)]
    assert [s.level for s in back] == [logging.INFO, logging.DEBUG, logging.DEBUG]
    assert back[0].line == "reg: the broker at b is back after 2.0 s; consumption goes on"
    assert outage.process_lost("lost the broker at b (again); retrying").news  # a new outage


def test_the_application_callback_gets_the_loss_and_the_return_only(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="keybus.databus")
    heard: list[tuple[bool, str]] = []
    link = BrokerLink("b:1", "t", "reg", DatabusConfig(), need_slots=False,
                      on_connection_change=lambda connected, message: heard.append(
                          (connected, message)))
    for connected in (False, False, True, True):
        link.connection_changed(connected, f"stream said {connected}")
    assert heard == [(False, "stream said False"), (True, "stream said True")]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, "reg: stream said False"), (logging.DEBUG, "reg: stream said True")]


def test_a_broker_never_reached_is_not_called_lost() -> None:
    """A registration started against a frozen broker or a closed port never had it:
    "cannot reach", as the Reader says (sdk/reconnect.py, rule 1), then "reached";
    only a broker lost after that is "lost" and "back"."""
    said: list[tuple[bool, str]] = []
    channel = _Channel()
    channel.state = grpc.ChannelConnectivity.CONNECTING
    watch = ConnectionWatch(cast(Any, channel), "127.0.0.1:1", report_ms=1_000,
                            say=lambda connected, message: said.append((connected, message)))
    assert watch.check(0) is None
    notice = watch.check(1_500)
    assert isinstance(notice, errors.Unavailable)
    assert str(notice) == ("cannot reach broker at 127.0.0.1:1 (not connected after 1500 ms, "
                           "channel CONNECTING); still trying")
    channel.state = grpc.ChannelConnectivity.READY
    assert watch.check(2_000) is None
    channel.state = grpc.ChannelConnectivity.TRANSIENT_FAILURE
    assert watch.check(3_000) is None and watch.check(4_000) is not None
    assert said == [
        (False, "cannot reach broker at 127.0.0.1:1 (not connected after 1500 ms); retrying"),
        (True, "reached the broker at 127.0.0.1:1 after 2.0 s"),
        (False, "lost the broker at 127.0.0.1:1 (unreachable for 1000 ms); retrying")]


def test_a_registration_that_never_started_is_not_told_its_windows_resume() -> None:
    """Before the broker answered the first call there are no windows to resume: the
    lines say the registration starts once it answers, then that consumption starts;
    once it answered, an outage is the usual one."""
    outage = LinkOutage("reg")
    lost = outage.process_lost("cannot reach broker at b (not connected after 600 ms); "
                               "retrying")
    assert lost.level == logging.WARNING
    assert lost.line == ("reg: cannot reach broker at b (not connected after 600 ms); "
                         "retrying; the registration starts once it answers")
    assert lost.message == "cannot reach broker at b (not connected after 600 ms); retrying"
    back = outage.process_back("reached the broker at b after 2.0 s")
    assert back.line == "reg: reached the broker at b after 2.0 s; consumption starts"
    outage.process_reached()
    again = outage.process_lost("lost the broker at b (connection closed); retrying")
    assert again.line.endswith("; windows resume where they stopped")
    assert outage.process_back("the broker at b is back after 1.0 s").line.endswith(
        "; consumption goes on")
