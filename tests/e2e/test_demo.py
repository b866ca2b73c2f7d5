"""The README's first command: `make run` (the embedded broker + a Key_Shared tour).

Goal: the demo a new user runs first works end to end and checks itself
(per-customer order across consumers joining and leaving), narrates both of
its partitions, tells the same story when run twice (its subscription keeps
its cursor: a second run handles its own 20,000 orders, and no subscription
is left behind with a backlog), and with its port taken says so in one line
with the way to choose another (`make run PORT=...`).
Method: `make run PORT=<free port> DATA_DIR=<temp dir>` as a subprocess in
its own process group; Ctrl-C is a SIGINT to that group, as a terminal sends.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.broker_process import REPO, free_port
from tests.support.lines import Lines

TOTAL = 20_000


def make_run(*args: str, timeout_s: float = 240) -> subprocess.Popen[str]:
    if not (REPO / ".venv" / ".installed").exists():
        pytest.skip("make run needs the installed .venv (make install)")
    env = dict(os.environ, COLUMNS="80")
    env.pop("MAKEFLAGS", None)
    return subprocess.Popen(["make", "--no-print-directory", "run", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def read_until(process: subprocess.Popen[str], text: str, timeout_s: float = 240) -> str:
    """Output up to the line holding `text` (the demo then serves until Ctrl-C)."""
    assert process.stdout is not None
    lines = Lines(process.stdout)
    try:
        lines.expect(text, timeout_s)
    except AssertionError:
        process.kill()
        raise
    process.lines = lines  # type: ignore[attr-defined]
    return lines.text()


def handled_total(output: str) -> int:
    match = re.search(r"events handled: (.*?) \(", output.replace("\n", " "))
    assert match, output
    return sum(int(n.replace(",", "")) for n in re.findall(r"[\d,]+", match[1]))


def test_make_run_twice_on_a_chosen_port(tmp_path: Path) -> None:
    port = free_port()
    for run in range(2):
        process = make_run(f"PORT={port}", f"DATA_DIR={tmp_path / 'data'}")
        try:
            output = read_until(process, "Ctrl-C stops it")
            assert "one consumer at a time, in offset order" in output
            assert "bob    p0 " in output and "bob    p1 " in output  # both partitions told
            assert handled_total(output) == TOTAL, (run, output)
            listed = subprocess.run(
                [sys.executable, "-m", "keybus", "subscriptions", "list", "demo-orders", "--json",
                 "--broker", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60,
                env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO)
            subscriptions = json.loads(listed.stdout)
            assert [(s["subscription"], s["backlog"]) for s in subscriptions] == \
                [("demo-billing", 0)]
        finally:
            os.killpg(process.pid, signal.SIGINT)
            process.wait(60)
        lines: Lines = process.lines  # type: ignore[attr-defined]
        lines.expect("stopping the broker", 30)
        assert "Traceback" not in lines.text()


def test_make_run_with_the_port_taken_says_how_to_choose_another(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = make_run(f"PORT={port}", f"DATA_DIR={tmp_path / 'data'}")
        output = process.communicate(timeout=120)[0]
    assert process.returncode != 0
    keybus_lines = [line for line in output.splitlines() if line.startswith("keybus")]
    assert keybus_lines == [
        f"keybus: error: cannot listen on 127.0.0.1:{port}: the port is in use (another Keybus "
        "broker? Pulsar's default port is 6650 too); choose another with --port N or "
        "KEYBUS_PORT=N (with make: make run PORT=6651)"], output
    assert "Traceback" not in output


def test_demo_json_narration(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "keybus", "demo", "--exit", "--json", "--port",
                           str(free_port()), "--data-dir", str(tmp_path / "d")],
                          capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = {e["event"] for e in events}
    assert {"serving", "join", "leave", "range_change", "summary"} <= kinds
    assert {e["partition"] for e in events if e["event"] == "range_change"} == {0, 1}
    summary = next(e for e in events if e["event"] == "summary")
    assert sum(summary["handled"].values()) == TOTAL and summary["redelivered"] >= 0
