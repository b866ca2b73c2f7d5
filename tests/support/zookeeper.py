"""A real ZooKeeper for integration tests: installed when missing, on a free port.

The server itself is `keybus.dev_cluster.ZooKeeperServer` (the same one
`keybus cluster dev` and the cluster benchmark run); here it is made sure
that Debian's `zookeeper` package and a Java runtime are installed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from keybus.dev_cluster import ZOOKEEPER_JAR, ZooKeeperServer
from tests.support.debian import ensure_program

__all__ = ["ZooKeeperServer", "ensure_zookeeper", "zookeeper_running"]


def ensure_zookeeper() -> str | None:
    """None when ZooKeeper and Java are there (installing them if needed), else why not."""
    reason = ensure_program("/usr/share/zookeeper/bin/zkServer.sh", "zookeeper")
    if reason is None and not ZOOKEEPER_JAR.exists():
        reason = f"the zookeeper package is installed but {ZOOKEEPER_JAR} is missing"
    return reason or ensure_program("java", "openjdk-17-jre-headless")


@contextlib.contextmanager
def zookeeper_running(data_dir: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper started in data_dir and stopped (by PID) after; the test is
    skipped, saying why, only when it cannot be installed."""
    reason = ensure_zookeeper()
    if reason is not None:
        pytest.skip(f"ZooKeeper is not available and could not be installed: {reason}")
    server = ZooKeeperServer(data_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()
