"""`keybus cluster dev`: a newcomer's local cluster starts, elects, says how to reach it, stops.

Method: the real command in a subprocess (ZooKeeper from Debian's package,
installed when missing, and one broker), with `--exit` so it stops again
once a leader is elected, or SIGTERM / SIGHUP once it printed its processes;
its output, exit status and the processes it leaves are checked.
"""

from __future__ import annotations

import json
import os
import signal
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


@pytest.mark.parametrize("which", ["broker", "zookeeper"])
def test_cluster_dev_with_a_port_taken_is_one_line_naming_it(tmp_path: Path, which: str) -> None:
    """A broker's port or ZooKeeper's taken: one line naming the port, exit 1, nothing
    left running (ZooKeeper's case said only its last SLF4J log line)."""
    reason = ensure_zookeeper()
    if reason is not None:
        pytest.skip(f"ZooKeeper is not available and could not be installed: {reason}")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        port, zookeeper_port = (busy, free_port()) if which == "broker" else (free_port(), busy)
        done = subprocess.run(
            [sys.executable, "-m", "keybus", "cluster", "dev", "--brokers", "1", "--dir",
             str(tmp_path / "cluster"), "--base-port", str(port), "--zookeeper-port",
             str(zookeeper_port), "--exit"], capture_output=True, text=True, timeout=120,
            check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    if which == "broker":
        assert line.startswith("keybus: error: broker exited with 1: keybus broker: error: "
                               f"cannot listen on 127.0.0.1:{port}: the port is in use"), line
        assert "stopped ZooKeeper" in done.stdout
    else:
        assert line == (f"keybus: error: cannot listen on 127.0.0.1:{zookeeper_port} for "
                        "ZooKeeper: the port is in use (another ZooKeeper? 2181 is its "
                        "default); choose another with --zookeeper-port N"), line
        with pytest.raises(OSError):  # no broker was started
            socket.create_connection(("127.0.0.1", port), timeout=1)


def stop_all(dev: subprocess.Popen[str], children: list[int]) -> None:
    """The cluster dev process and what it started, by PID: only what this test started."""
    dev.kill()
    dev.wait(10)
    for pid in children:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_cluster_dev_stopped_by_a_signal_stops_what_it_started(tmp_path: Path,
                                                               stop: signal.Signals) -> None:
    reason = ensure_zookeeper()
    if reason is not None:
        pytest.skip(f"ZooKeeper is not available and could not be installed: {reason}")
    command = [sys.executable, "-m", "keybus", "cluster", "dev", "--brokers", "1", "--dir",
               str(tmp_path / "cluster"), "--base-port", str(free_port()), "--zookeeper-port",
               str(free_port()), "--json"]
    dev = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children: list[int] = []
    try:
        assert dev.stdout is not None
        info = json.loads(dev.stdout.readline())  # printed once the leader is elected
        children = [info["zookeeper_pid"], *(p["pid"] for p in info["processes"])]
        assert all(alive(pid) for pid in children), children
        dev.send_signal(stop)
        code = dev.wait(60)
        assert code == 128 + stop, (code, dev.stderr.read() if dev.stderr else "")
        left = [pid for pid in children if alive(pid)]
        assert not left, f"still running after cluster dev exited: {left}"
    finally:
        stop_all(dev, children)


@pytest.mark.parametrize(("acks", "said"), [
    ("5", "--acks 5 needs 5 followers besides the leader, 6 brokers; allowed with --brokers 2: "
          "leader or 0..1"),
    ("x", "--acks 'x' is invalid; allowed with --brokers 2: leader or 0..1")])
def test_cluster_dev_refuses_more_acks_than_followers(tmp_path: Path, acks: str,
                                                      said: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "keybus", "cluster", "dev", "--brokers", "2", "--acks", acks,
         "--dir", str(tmp_path / "cluster"), "--exit"], capture_output=True, text=True,
        timeout=60, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip() == f"keybus: error: {said} (see keybus cluster dev --help)"
    assert not (tmp_path / "cluster").exists()  # refused before anything started


@pytest.mark.parametrize("kind", ["a file", "under a file"])
def test_cluster_dev_with_a_dir_it_cannot_use_is_one_line(tmp_path: Path, kind: str) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    root = a_file if kind == "a file" else a_file / "cluster"
    done = subprocess.run(
        [sys.executable, "-m", "keybus", "cluster", "dev", "--brokers", "1", "--dir", str(root),
         "--exit"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    said = done.stderr.strip()
    assert said.startswith(f"keybus: error: cannot use --dir {root}: "), said
    assert "give a directory this user can create and write" in said and "\n" not in said
    assert a_file.read_text() == ""  # nothing written there


def test_cluster_dev_on_the_directory_of_a_running_cluster_leaves_it_alone(
        tmp_path: Path) -> None:
    """A second `cluster dev --dir D` (other ports) while one runs there: one line naming
    the other's pid, exit 1, nothing rewritten or started; the same once that one was
    killed with SIGKILL and left its broker running. Before, it rewrote the running
    cluster's configs (the restart command it printed then named a ZooKeeper that
    never ran) and started a second ZooKeeper on the first one's data."""
    reason = ensure_zookeeper()
    if reason is not None:
        pytest.skip(f"ZooKeeper is not available and could not be installed: {reason}")
    root = tmp_path / "cluster"
    dev = subprocess.Popen([sys.executable, "-m", "keybus", "cluster", "dev", "--brokers", "1",
                            "--dir", str(root), "--base-port", str(free_port()),
                            "--zookeeper-port", str(free_port()), "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children: list[int] = []
    again = [sys.executable, "-m", "keybus", "cluster", "dev", "--brokers", "1", "--dir",
             str(root), "--base-port", str(free_port()), "--zookeeper-port", str(free_port()),
             "--exit"]
    try:
        assert dev.stdout is not None
        info = json.loads(dev.stdout.readline())  # printed once the leader is elected
        children = [info["zookeeper_pid"], *(p["pid"] for p in info["processes"])]
        configs = {path: path.read_text() for path in root.glob("*.*") if path.suffix in
                   (".toml", ".cfg")}
        done = subprocess.run(again, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 1, done.stderr[-2000:]
        assert done.stderr.strip() == (f"keybus: error: {root} is in use by another keybus "
                                       f"cluster dev (pid {dev.pid}); stop it (Ctrl-C there) "
                                       "or choose another --dir"), done.stderr
        assert {path: path.read_text() for path in configs} == configs
        dev.kill()  # SIGKILL: ZooKeeper and the broker are left running
        dev.wait(10)
        done = subprocess.run(again, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 1, done.stderr[-2000:]
        assert done.stderr.strip().startswith(
            f"keybus: error: {root} is in use: the data of broker-1 is held by a running "
            "broker"), done.stderr
        assert {path: path.read_text() for path in configs} == configs
    finally:
        stop_all(dev, children)
