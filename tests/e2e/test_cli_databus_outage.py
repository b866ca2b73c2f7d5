"""`keybus databus tail` while its broker is away: a line when lost, one when back.

Goal: a tail whose broker is killed says so once, in the words and on the
stream (stderr) of `consume` and `read --follow` ("keybus: lost the broker at
HOST:PORT (connection closed); retrying"), says once that it is back
("keybus: the broker at HOST:PORT is back after N s"), and goes on printing
windows. Before, it said the loss once (a warning from on_error after 5 s)
and its return not at all; earlier still, the SDK's reader inside it printed
its own report too, without the `keybus:` prefix.
Method: `python -m keybus databus tail` as a subprocess; a real broker
process killed with SIGKILL for 7 s (past the 5 s report threshold) and
restarted on the same port and data directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from tests.e2e.test_cli import keybus, ok
from tests.e2e.test_cli_databus import WINDOW_2, produce_window
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.interrupt import python_module


def _line(stream: IO[str], deadline_s: float) -> str:
    """The next stdout line, within the deadline (the tail prints one per window)."""
    os.set_blocking(stream.fileno(), False)
    while time.monotonic() < deadline_s:
        line = stream.readline()
        if line:
            return line
        time.sleep(0.05)
    raise AssertionError("timed out waiting for a window")


def test_tail_says_an_outage_once_and_goes_on(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    tail: subprocess.Popen[str] | None = None
    try:
        ok(keybus(broker, "topics", "create", "away"))
        produce_window(broker, "away", WINDOW_2)
        env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=broker.address)
        tail = subprocess.Popen(python_module("keybus", "databus", "tail", "away",
                                              "--sources", "a"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
        assert tail.stdout is not None and tail.stderr is not None
        assert "DataEvent(a.4)" in _line(tail.stdout, time.monotonic() + 60)
        broker.kill()
        time.sleep(7)
        broker.start()
        produce_window(broker, "away", WINDOW_2)
        assert "DataEvent(a.4)" in _line(tail.stdout, time.monotonic() + 60)
        tail.send_signal(signal.SIGINT)
        tail.wait(30)
        said = [line for line in tail.stderr.read().splitlines() if broker.address in line]
        assert len(said) == 2, said
        assert said[0] == f"keybus: lost the broker at {broker.address} (connection closed); " \
                          "retrying"
        assert said[1].startswith(f"keybus: the broker at {broker.address} is back after ")
    finally:
        if tail is not None and tail.poll() is None:
            tail.kill()
            tail.wait(10)
        broker.stop()
