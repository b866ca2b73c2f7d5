"""kazoo's lines about each connection attempt: once per outage, repeats at DEBUG.

The pure `ReconnectLines` with time as an argument, and `KazooLog` (the
logger kazoo is given) writing through the real logging module. The
integration test with a real ZooKeeper killed and restarted is in
tests/integration/test_relay_zookeeper_loss.py.
"""

from __future__ import annotations

import logging

import pytest

from broker.relay.zk_lines import ATTEMPT, KazooLog, Outage, ReconnectLines

DROPPED = "Connection dropped: %s"
TIMED_OUT = "Connection time-out: %s"


def test_each_kind_is_said_once_per_outage_and_repeats_go_to_debug() -> None:
    lines = ReconnectLines()
    levels = [lines.level(message, level, float(second)) for second, (message, level) in
              enumerate([(DROPPED, logging.WARNING), (ATTEMPT, logging.INFO),
                         (DROPPED, logging.WARNING), (ATTEMPT, logging.INFO),
                         (TIMED_OUT, logging.WARNING), (DROPPED, logging.WARNING)])]
    assert levels == [logging.WARNING, logging.INFO, logging.DEBUG, logging.DEBUG,
                      logging.WARNING, logging.DEBUG]
    assert lines.connected(10.0) == Outage(seconds=10.0, failed=4)


def test_a_new_outage_says_its_lines_again() -> None:
    lines = ReconnectLines()
    lines.level(DROPPED, logging.WARNING, 0.0)
    lines.connected(1.0)
    assert lines.level(DROPPED, logging.WARNING, 5.0) == logging.WARNING
    assert lines.connected(7.5) == Outage(seconds=2.5, failed=1)


def test_other_lines_and_a_connection_without_failures_pass_unchanged() -> None:
    lines = ReconnectLines()
    assert lines.level("Zookeeper connection lost", logging.INFO, 0.0) == logging.INFO
    assert lines.level(ATTEMPT, logging.INFO, 0.0) == logging.INFO  # the first connect
    assert lines.level("Session has expired", logging.WARNING, 0.0) == logging.WARNING
    assert lines.level("Session has expired", logging.WARNING, 0.0) == logging.WARNING
    assert lines.connected(1.0) is None  # no attempt failed: nothing to sum up


def test_kazoo_log_writes_as_kazoo_client(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="kazoo.client")
    log = KazooLog()
    for _ in range(3):
        log.info(ATTEMPT, "h", "127.0.0.1", 1, False)
        log.warning(DROPPED, "socket connection error: Connection refused")
    outage = log.connected()
    said = [(r.name, r.levelno, r.getMessage()) for r in caplog.records
            if r.levelno >= logging.INFO]
    assert said == [
        ("kazoo.client", logging.INFO, "Connecting to h(127.0.0.1):1, use_ssl: False"),
        ("kazoo.client", logging.WARNING,
         "Connection dropped: socket connection error: Connection refused")]
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 4
    assert outage is not None and outage.failed == 3
