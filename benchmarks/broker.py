"""Start a broker process for a benchmark (127.0.0.1, temp dir) and stop it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path


@contextlib.contextmanager
def running_broker(*extra_args: str, launcher: Sequence[str] = ("-m", "broker")
                   ) -> Iterator[tuple[str, int]]:
    """Yield (address, pid) of a fresh broker on a temp data dir; stop it after.
    `launcher`: what runs it (python's arguments before the broker's options)."""
    with tempfile.TemporaryDirectory(prefix="keybus-bench-") as tmp:
        ready = Path(tmp) / "ready"
        command = [sys.executable, *launcher, "--data-dir", str(Path(tmp) / "data"),
                   "--host", "127.0.0.1", "--port", "0", "--ready-file", str(ready),
                   "--log-level", "WARNING", *extra_args]
        process = subprocess.Popen(command, env=dict(os.environ))
        try:
            deadline = time.monotonic() + 30
            while not ready.exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("benchmark broker did not start")
                time.sleep(0.02)
            yield f"127.0.0.1:{ready.read_text()}", process.pid
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
