"""`keybus cluster dev`: a newcomer's local cluster starts, elects, says how to reach it, stops.

Method: the real command in a subprocess (ZooKeeper from Debian's package,
installed when missing, and one broker), with `--exit` so it stops again
once a leader is elected; its output and the processes it leaves are checked.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from keybus.dev_cluster import free_port
from tests.support.zookeeper import ensure_zookeeper


def test_cluster_dev_starts_elects_and_stops(tmp_path: Path) -> None:
    reason = ensure_zookeeper()
    if reason is not None:
        pytest.skip(f"ZooKeeper is not available and could not be installed: {reason}")
    port, zookeeper_port = free_port(), free_port()
    done = subprocess.run(
        [sys.executable, "-m", "keybus", "cluster", "dev", "--brokers", "1", "--dir",
         str(tmp_path / "cluster"), "--base-port", str(port), "--zookeeper-port",
         str(zookeeper_port), "--exit"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"broker      127.0.0.1:{port}" in done.stdout and "leader of demo" in done.stdout
    assert "keybus cluster status --broker" in done.stdout and "stopped ZooKeeper" in done.stdout
    assert (tmp_path / "cluster" / "broker-1.log").exists()
    with pytest.raises(OSError):  # nothing listens any more
        socket.create_connection(("127.0.0.1", port), timeout=1)


def test_cluster_dev_with_its_port_taken_is_one_line(tmp_path: Path) -> None:
    reason = ensure_zookeeper()
    if reason is not None:
        pytest.skip(f"ZooKeeper is not available and could not be installed: {reason}")
    zookeeper_port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "keybus", "cluster", "dev", "--brokers", "1", "--dir",
             str(tmp_path / "cluster"), "--base-port", str(port), "--zookeeper-port",
             str(zookeeper_port), "--exit"], capture_output=True, text=True, timeout=120,
            check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("keybus: error: broker exited with 1: keybus broker: error: cannot "
                           f"listen on 127.0.0.1:{port}: the port is in use"), line
    assert "stopped ZooKeeper" in done.stdout
    with pytest.raises(OSError):  # ZooKeeper was stopped too
        socket.create_connection(("127.0.0.1", zookeeper_port), timeout=1)
