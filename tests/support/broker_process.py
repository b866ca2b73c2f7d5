"""A real broker process on 127.0.0.1 for integration tests.

Starts `python -m broker` on a temp data dir, waits for its ready file (the
bound port), and can SIGKILL and restart it on the same port and data dir.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from keybus.dev_cluster import free_port

REPO = Path(__file__).resolve().parents[2]


class BrokerProcess:
    """One broker subprocess; `address` is "127.0.0.1:PORT"."""

    def __init__(self, data_dir: Path, *extra_args: str, port: int | None = None,
                 prefix: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        self.prefix = list(prefix)  # e.g. strace and its options: the broker runs under it
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.broker.log"
        self.started_s = 0.0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> float:
        """Start and wait until serving; returns seconds from spawn to ready."""
        ready = self.data_dir.parent / f"{self.data_dir.name}.ready"
        ready.unlink(missing_ok=True)
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        command = [*self.prefix, sys.executable, "-m", "broker", "--data-dir", str(self.data_dir),
                   "--host", "127.0.0.1", "--port", str(self.port), "--ready-file", str(ready),
                   *self.extra_args]
        began = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        while not ready.exists():
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}: "
                                   f"{self.log_path.read_text()[-2000:]}")
            if time.monotonic() - began > timeout_s:
                self.kill()
                raise TimeoutError(f"broker not ready in {timeout_s}s")
            time.sleep(0.01)
        self.started_s = time.monotonic() - began
        return self.started_s

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        """SIGTERM and wait: a clean shutdown."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> float:
        self.kill()
        return self.start()


__all__ = ["REPO", "BrokerProcess", "free_port"]
