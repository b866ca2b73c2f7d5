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


class PortTaken(RuntimeError):
    """The broker could not bind its port: something else holds it."""


class BrokerProcess:
    """One broker subprocess; `address` is "127.0.0.1:PORT"."""

    def __init__(self, data_dir: Path, *extra_args: str, port: int | None = None,
                 prefix: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        self.prefix = list(prefix)  # e.g. strace and its options: the broker runs under it
        self.port = port or free_port()
        self._port_is_ours = port is None  # picked here: a first start may move off it
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.broker.log"
        self.started_s = 0.0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> float:
        """Start and wait until serving; returns seconds from spawn to ready.

        A first start on a port picked here moves to another free port when
        something took this one between the check and the broker's bind (up to
        3 times); a restart keeps its port, as the tests that restart expect.
        """
        movable = self._port_is_ours and self.process is None  # a first start, port ours
        for _ in range(3 if movable else 0):
            try:
                return self._start_once(timeout_s)
            except PortTaken:
                self.port = free_port()
        return self._start_once(timeout_s)

    def _start_once(self, timeout_s: float) -> float:
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
                told = self.log_path.read_text()[-2000:]
                failure = f"broker exited with {self.process.returncode}: {told}"
                if f"cannot listen on 127.0.0.1:{self.port}: the port is in use" in told:
                    self.process = None
                    raise PortTaken(failure)
                raise RuntimeError(failure)
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
