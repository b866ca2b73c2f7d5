"""A local cluster on 127.0.0.1: one ZooKeeper and N brokers as child processes.

For `keybus cluster dev` (a newcomer's way to watch failover), the cluster
benchmark and the tests. ZooKeeper is Debian's `zookeeper` package run
standalone from its jar (no system service), on a free port with its data
in a directory of ours; every process is stopped by its PID.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_CONF = Path("/etc/zookeeper/conf")  # the package's log4j settings
REPO = Path(__file__).resolve().parents[1]


PORT_FLOOR = 10_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def port_range() -> tuple[int, int]:
    """Where `free_port` picks: `KEYBUS_PORT_RANGE` ("LOW-HIGH"), or from
    `PORT_FLOOR` up to the start of the kernel's ephemeral range."""
    given = os.environ.get("KEYBUS_PORT_RANGE", "").strip()
    if given:
        low_text, _, high_text = given.partition("-")
        try:
            low, high = int(low_text), int(high_text)
        except ValueError:
            low = high = 0
        if not 1_024 <= low < high <= 65_536:
            raise ValueError(f"KEYBUS_PORT_RANGE={given!r} is not a port range; "
                             "give LOW-HIGH with 1024 <= LOW < HIGH <= 65536, e.g. 20000-21000")
        return low, high
    try:
        ephemeral_low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32_768
    return PORT_FLOOR, max(ephemeral_low, PORT_FLOOR + 1_000)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, for a server started next.

    Why not the kernel's pick (bind to port 0): that comes from the ephemeral
    range (32768-60999 on Linux), which every outgoing connection takes its own
    port from too, so a client connecting elsewhere can take the port between
    this check and the server's bind (seen as "the port is in use" in a parallel
    test run). A random port below that range is never given to a connection;
    it is bound once here to check that nothing holds it.

    `KEYBUS_PORT_RANGE=LOW-HIGH` narrows the pick to LOW..HIGH-1. Parallel test
    workers each get a range of their own (tests/conftest.py), so one worker
    never picks a port another worker's broker is about to bind, or has left
    for a moment while it restarts on it.
    """
    low, high = port_range()
    for _ in range(100):
        port = random.randrange(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # all taken: the kernel's pick after all
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:port (bound once to see), for a server about to
    bind it or one that should have let it go. Bound with SO_REUSEADDR as servers
    bind theirs (ZooKeeper, gRPC), so a port left in TIME_WAIT by a process just
    stopped counts as free, as it does for them."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class ZooKeeperServer:
    """One standalone ZooKeeper; `address` is "127.0.0.1:PORT". A short tick
    (250 ms) allows session timeouts of a second or two."""

    def __init__(self, data_dir: Path, port: int | None = None, tick_ms: int = 250) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> float:
        """Start (the same port and data on a restart); returns seconds until it answered."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir.parent / f"{self.data_dir.name}.cfg"
        config.write_text("\n".join([
            f"tickTime={self.tick_ms}", f"dataDir={self.data_dir}", f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1", "admin.enableServer=false", "maxClientCnxns=0",
            f"minSessionTimeout={2 * self.tick_ms}", "maxSessionTimeout=60000",
            "4lw.commands.whitelist=ruok", ""]))
        classpath = os.pathsep.join([str(ZOOKEEPER_CONF), str(ZOOKEEPER_JAR)])
        command = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", classpath,
                   "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        return _wait_ready(self.process, self.answers, self.log_path, timeout_s, "zookeeper")

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(16) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM by PID; SIGKILL if it is not gone within 10 s."""
        _stop(self.process)


class BrokerRunner:
    """One `python -m broker` child on 127.0.0.1 with a config file; kill -9 and restart."""

    def __init__(self, data_dir: Path, port: int, config: Path, *extra_args: str) -> None:
        self.data_dir = data_dir
        self.port = port
        self.config = config
        self.extra_args = list(extra_args)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    def start(self, timeout_s: float = 30.0) -> float:
        """Start and wait until it serves; returns seconds from spawn to ready."""
        ready = self.data_dir.parent / f"{self.data_dir.name}.ready"
        ready.unlink(missing_ok=True)
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        command = [sys.executable, "-m", "broker", "--config", str(self.config),
                   "--data-dir", str(self.data_dir), "--host", "127.0.0.1",
                   "--port", str(self.port), "--ready-file", str(ready), *self.extra_args]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        return _wait_ready(self.process, ready.exists, self.log_path, timeout_s, "broker")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        if self.running():
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        """SIGTERM: a clean stop (a leader hands over first)."""
        _stop(self.process)


def _wait_ready(process: subprocess.Popen[bytes], ready: Callable[[], bool], log_path: Path,
                timeout_s: float, what: str) -> float:
    """Seconds until ready() holds; a process that exits or takes too long is an error."""
    began = time.monotonic()
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}: "
                               f"{log_path.read_text()[-2000:]}")
        if time.monotonic() - began > timeout_s:
            process.kill()
            process.wait(10)
            raise TimeoutError(f"{what} not ready within {timeout_s} s")
        time.sleep(0.02)
    return time.monotonic() - began


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def cluster_config(zookeeper: str, acks: int | str = 2, session_timeout_ms: int = 2_000,
                   extra: Mapping[str, object] | None = None) -> str:
    """A broker config (TOML) electing every topic through `zookeeper`."""
    lines = [f'zookeeper = "{zookeeper}"', f"zookeeper_session_timeout_ms = {session_timeout_ms}"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in (extra or {}).items()]
    lines += ['[replication."*"]', 'election = "zookeeper"', f'acks = "{acks}"', ""]
    return "\n".join(lines)


def start_cluster(root: Path, brokers: int, zookeeper: str, acks: int | str = 2,
                  ports: list[int] | None = None, session_timeout_ms: int = 2_000,
                  extra: Mapping[str, object] | None = None) -> list[BrokerRunner]:
    """Write configs and start `brokers` brokers under `root` (broker-1, broker-2, ...)."""
    runners = []
    for i in range(brokers):
        config = root / f"broker-{i + 1}.toml"
        config.write_text(cluster_config(zookeeper, acks, session_timeout_ms, extra))
        port = ports[i] if ports else free_port()
        runners.append(BrokerRunner(root / f"broker-{i + 1}", port, config))
    try:
        for runner in runners:
            runner.start()
    except BaseException:  # none left running behind a failed start
        for runner in runners:
            runner.kill()
        raise
    return runners
