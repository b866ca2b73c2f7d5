"""The README's main job: `keybus demo` (embedded broker + Key_Shared tour).

Goal: the demo a new user runs first works end to end and checks itself
(per-customer order across consumers joining and leaving).
Method: run `python -m keybus demo --exit` on a temp dir and a free port.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.broker_process import REPO, free_port


def test_demo_runs_and_checks_key_order(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="160")
    command = [sys.executable, "-m", "keybus", "demo", "--exit", "--data-dir", str(tmp_path / "d"),
               "--port", str(free_port())]
    for _ in range(2):  # a second run appends to the same topic and still checks out
        done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, cwd=REPO)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "one consumer at a time, in offset order" in done.stdout
        assert "bob      partition 0 now serves" in done.stdout
