"""`keybus` against a frozen broker: its port takes the TCP connection (the kernel
accepts for a stopped process), nothing answers.

Goal: the CLI says within seconds, bounded by --timeout, that the broker at H:P
accepted the connection but did not answer (frozen or overloaded), not "cannot
connect — is it running?" after the ~15 s a keepalive ping takes to give up; a
refused connection keeps its own words.
Method: a real broker process SIGSTOPped (SIGCONT and stopped in a finally);
`keybus` as a subprocess, timed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sdk import errors
from tests.support.broker_process import REPO, BrokerProcess, free_port


def _keybus(broker: str, *args: str, stdin: str = ""
            ) -> tuple[subprocess.CompletedProcess[str], float]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "keybus", *args, "--broker", broker], env=env,
                          cwd=REPO, timeout=60, capture_output=True, text=True, input=stdin)
    return done, time.monotonic() - began


def test_a_frozen_broker_is_told_within_seconds_and_apart_from_a_refused_one(
        tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        assert _keybus(broker.address, "topics", "create", "orders")[0].returncode == 0
        os.kill(broker.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        done, took_s = _keybus(broker.address, "topics", "list")
        assert done.returncode == 1, done.stderr
        assert took_s < 10, took_s  # the default connect wait (5 s) and start-up
        assert done.stderr == (
            f"keybus: error: the broker at {broker.address} accepted the connection but did not "
            "answer within 5 s — is it frozen (stopped) or overloaded? (a broker not running "
            "refuses the connection)\n")
        done, took_s = _keybus(broker.address, "subscriptions", "seek", "orders", "s", "--to",
                               "0", "--timeout", "1")
        assert done.returncode == 1 and took_s < 6, (took_s, done.stderr)
        assert "accepted the connection but did not answer within 1 s" in done.stderr
        # the producer too (it took the keepalive's 16 s before)
        done, took_s = _keybus(broker.address, "produce", "orders",
                               stdin='{"key": 1, "value": "x"}\n')
        assert done.returncode == 1 and took_s < 10, (took_s, done.stderr)
        assert "accepted the connection but did not answer within 5 s" in done.stderr
    finally:
        if broker.process is not None and broker.process.poll() is None:
            os.kill(broker.process.pid, signal.SIGCONT)
        broker.stop()
    done, _ = _keybus(f"127.0.0.1:{free_port()}", "topics", "list")
    assert done.returncode == 1
    assert "connection refused — is it running?" in done.stderr


def test_an_unanswered_keepalive_ping_while_connecting_is_not_called_cannot_connect() -> None:
    """gRPC's words when the ping gave up before the handshake was answered (what a
    call without a connect wait, such as a produce's, gets after ~15 s)."""
    details = ("failed to connect to all addresses; last error: UNAVAILABLE: "
               "ipv4:127.0.0.1:6650: Delayed close due to in-progress write (ping timeout) "
               "(goaway sent)")
    reason = errors.connection_failure(details)
    assert reason is not None
    assert str(errors.unreachable("127.0.0.1:6650", reason)) == (
        "the broker at 127.0.0.1:6650 accepted the connection but did not answer (a keepalive "
        "ping went unanswered for 5 s) — is it frozen (stopped) or overloaded? (a broker not "
        "running refuses the connection)")
