"""A real redis-server on 127.0.0.1 for integration tests.

Debian's `redis-server` (installed by `ensure_program` when missing) runs as
our child on a free port with a temp dir for its files, no persistence
(`--save ''`, no AOF) unless asked; it is stopped by its PID. `restart()`
kills it and starts a new one on the same port: with no persistence the
data is gone, as after a crash of a cache-only Redis. With `persist=True`
every write goes to an append-only file in that dir, fsynced before Redis
answers (`--appendfsync always`), so even a SIGKILL loses nothing and
`restart()` comes back with every key (and its expiry, which Redis keeps as
an absolute time: a key whose time passed while it was down is gone).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.support.broker_process import free_port
from tests.support.debian import ensure_program

READY_TIMEOUT_S = 20.0
REDIS_PASSWORD = "s3cret-Pa55"  # what the `locked_redis` fixture asks for


def redis_unavailable() -> str | None:
    """None when redis-server can run here, else why not (for a loud skip)."""
    return ensure_program("redis-server", "redis-server")


class RedisServer:
    """One redis-server process; `url` is redis://127.0.0.1:PORT/0."""

    def __init__(self, directory: Path, port: int | None = None, password: str = "",
                 persist: bool = False) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.password = password  # "" = none; else --requirepass and in `url`
        self.persist = persist  # AOF in `directory`, fsynced per write: restart() keeps the keys
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = directory / "redis.log"

    @property
    def url(self) -> str:
        secret = f":{self.password}@" if self.password else ""
        return f"redis://{secret}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start and wait until it answers PING."""
        self.directory.mkdir(parents=True, exist_ok=True)
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                   "--dir", str(self.directory), "--save", "",
                   "--appendonly", "yes" if self.persist else "no", "--protected-mode", "no"]
        if self.persist:
            command += ["--appendfsync", "always"]
        if self.password:
            command += ["--requirepass", self.password]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._pings():
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: "
                                   f"{self.log_path.read_text(errors='replace')[-1500:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"redis-server not ready on port {self.port} in "
                                   f"{READY_TIMEOUT_S} s")
            time.sleep(0.02)

    def _pings(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                # Without the password a PING is answered -NOAUTH: up all the same.
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL if it does not end in 10 s."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def restart(self) -> None:
        """Kill and start again on the same port: every key is gone, unless
        `persist` (then every key written before the kill is back)."""
        self.kill()
        self.start()
