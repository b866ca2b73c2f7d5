"""Install a peer server from Debian's packages if missing; run it on 127.0.0.1.

One command must reproduce the comparison on a fresh machine, so a missing
`redis-server` or `nats-server` is installed with apt-get (as root). The
server runs in the foreground as our child on a free port and a temp
directory, and is stopped by its PID (SIGTERM, then SIGKILL) even on failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

INSTALL_TIMEOUT_S = 600
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
_SBIN_PATH = os.pathsep.join(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/bin"])


class ServerUnavailable(RuntimeError):
    """The server binary is missing and could not be installed (the message says why)."""


def find_binary(binary: str) -> str | None:
    """The binary's path; Debian puts nats-server in /usr/sbin, outside a user's PATH."""
    return shutil.which(binary) or shutil.which(binary, path=_SBIN_PATH)


def ensure_installed(binary: str, package: str) -> str:
    """Path of `binary`, after `apt-get install -y PACKAGE` when it is missing."""
    found = find_binary(binary)
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise ServerUnavailable(f"{binary} is missing and there is no apt-get to install "
                                f"{package}; install it by hand")
    if os.geteuid() != 0:
        raise ServerUnavailable(f"{binary} is missing; installing it needs root: "
                                f"apt-get update && apt-get install -y {package}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=INSTALL_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as error:
            raise ServerUnavailable(f"`{' '.join(command)}` took over {INSTALL_TIMEOUT_S} s") \
                from error
        if done.returncode != 0:
            raise ServerUnavailable(f"`{' '.join(command)}` failed ({done.returncode}): "
                                    f"{done.stderr.strip()[-500:]}")
    found = find_binary(binary)
    if not found:
        raise ServerUnavailable(f"installed {package} but found no {binary}")
    return found


def version_of(binary: str) -> str:
    """First line of `BINARY --version` (e.g. "Redis server v=7.0.15 ...")."""
    done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10,
                          check=False)
    return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr) \
        else "unknown"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def running_server(command: list[str], port: int, log_path: Path,
                   ready: Callable[[], bool] | None = None) -> Iterator[int]:
    """Start `command`, wait until 127.0.0.1:port accepts (and `ready()`), yield its PID."""
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (_accepts(port) and (ready is None or ready())):
            if process.poll() is not None:
                raise ServerUnavailable(f"{command[0]} exited with {process.returncode}: "
                                        f"{log_path.read_text(errors='replace')[-1500:]}")
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"{command[0]} did not accept connections on port {port} "
                                        f"within {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.05)
        yield process.pid
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process we started, then SIGKILL if it does not end in time."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_TIMEOUT_S)
