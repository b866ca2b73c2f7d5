"""Install a Debian package for an integration test when its program is missing.

The real-parts rule: integration tests run a real redis-server or ZooKeeper
from Debian's packages. On a fresh machine the test set-up installs them
(`apt-get update` then `apt-get install -y`, as root); where that cannot be
done, the caller skips with the reason this returns, loudly.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

_INSTALL_TIMEOUT_S = 600


def ensure_program(program: str, package: str) -> str | None:
    """Make `program` available, installing `package` if needed.

    Returns:
        None when the program is there (already or after installing), else a
        sentence saying why it could not be installed.
    """
    if _find(program):
        return None
    if os.geteuid() != 0:
        return f"{program} is missing and installing {package} needs root (apt-get install -y {package})"
    # Test processes run side by side (pytest -n): one installs, the others wait and find it.
    with open(Path(tempfile.gettempdir()) / "keybus-tests-apt.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return None if _find(program) else _install(program, package)


def _install(program: str, package: str) -> str | None:
    environment = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
        try:
            done = subprocess.run(command, env=environment, capture_output=True, text=True,
                                  timeout=_INSTALL_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"{' '.join(command)} failed: {e}"
        if done.returncode != 0:
            return f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-500:]}"
    return None if _find(program) else f"{package} installed but {program} is still not found"


def _find(program: str) -> str | None:
    if os.sep in program:
        return program if Path(program).exists() else None
    return shutil.which(program)
