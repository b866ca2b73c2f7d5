"""`keybus cluster status` and `keybus cluster dev`: see who leads what, run a local cluster.

Registered on the root group by main.py. Rendering is in render_cluster.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import IO

import click
import grpc

from broker.relay.settings import ReplicationError, parse_acks
from keybus.cli import render_cluster as render
from keybus.cli.common import (
    Connection,
    Group,
    checked_name,
    connection_options,
    fail,
    json_option,
    note,
    print_json,
    run,
    stdout_console,
    wide_option,
)
from keybus.dev_cluster import (
    ZOOKEEPER_JAR,
    BrokerRunner,
    ZooKeeperServer,
    port_free,
    start_cluster,
)
from sdk import errors
from sdk.admin import Admin
from sdk.channel import open_channel, stub_of
from sdk.cluster import find_leader, split_brokers
from sdk.core.pb import keybus_pb2 as pb

PROBE_TIMEOUT_S = 3.0
DEFAULT_ZOOKEEPER_PORT = 2181
# Signals that end `cluster dev` as Ctrl-C does: `kill PID`, a closed terminal.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal arrived (raised in the main thread, like KeyboardInterrupt,
    so no `except Exception` on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """While inside: SIGTERM and SIGHUP raise `Stopped`, once; a second one while
    the children are being stopped is ignored, so the stop is not cut short.
    Why: their default action ends the process at once, leaving ZooKeeper and
    every broker running with nobody to stop them."""
    def handler(signum: int, _: FrameType | None) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, action in previous.items():
            signal.signal(sig, action)


@click.group(cls=Group)
def cluster() -> None:
    """Relay chaining and leader election: roles per topic, a local cluster."""


async def gather_status(addresses: list[str], topic: str, timeout_s: float = PROBE_TIMEOUT_S
                        ) -> list[render.Answer]:
    """Every broker's DescribeCluster answer (or why there is none), concurrently."""
    async def ask(address: str) -> render.Answer:
        channel = open_channel(address)
        stub = stub_of(channel)
        try:
            try:
                return address, await stub.DescribeCluster(
                    pb.DescribeClusterRequest(topic=topic), timeout=timeout_s)
            except grpc.RpcError as e:
                error = errors.from_rpc_error(e, address)
                if not (topic and error.code == errors.NOT_FOUND):
                    return address, _no_answer(error)
            # It answered that it lacks the topic: a broker without it, not one that did
            # not answer (its ZooKeeper state still counts); `lacking` names it.
            info: pb.ClusterInfo = await stub.DescribeCluster(
                pb.DescribeClusterRequest(topic=""), timeout=timeout_s)
            return address, pb.ClusterInfo(broker_id=info.broker_id, address=info.address,
                                           zookeeper=info.zookeeper,
                                           zookeeper_state=info.zookeeper_state)
        except grpc.RpcError as e:
            return address, _no_answer(errors.from_rpc_error(e, address))
        finally:
            await channel.close()
    return list(await asyncio.gather(*(ask(a) for a in addresses)))


def _no_answer(error: errors.KeybusError) -> str:
    """Why a broker gave no state: it did not answer (unreachable), or it said no."""
    if error.code in (errors.UNAVAILABLE, errors.DEADLINE_EXCEEDED):
        return str(error)
    return render.Refused(str(error))


def lacking(answers: list[render.Answer], topic: str) -> list[str]:
    """The brokers that answered without `topic` (none when every topic was asked)."""
    return [address for address, info in answers if topic and not isinstance(info, str)
            and all(t.topic != topic for t in info.topics)]


def _topic_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """`--topic`: a topic name, '' for every topic."""
    return value if value == "" else checked_name(ctx, param, value) or ""


@cluster.command("status")
@click.option("--topic", default="", callback=_topic_option,
              help="One topic (default every topic).")
@connection_options
@wide_option
@json_option
def status(topic: str, conn: Connection, wide: bool, as_json: bool) -> None:
    """Per topic: the leader, the followers with their lag in events and seconds, and
    each broker's ZooKeeper session; with acks = n, how many followers follow the
    leader ("following" 1/2: fewer than needed, produce is refused). --broker takes
    every broker: h1:6650,h2:6650,... (--timeout: how long each broker may take to
    answer, default 3 s)."""
    answers = run(gather_status(split_brokers(conn.broker), topic,
                                conn.timeout_s or PROBE_TIMEOUT_S))
    if as_json:
        print_json(render.cluster_dict(answers))
    else:
        console = stdout_console(wide)
        console.print(render.cluster_table(answers, console.width, wide))
    if all(isinstance(info, str) for _, info in answers):
        fail("no broker answered: " + "; ".join(f"{a}: {info}" for a, info in answers))
    without = lacking(answers, topic)
    answered = [address for address, info in answers if not isinstance(info, str)]
    if without == answered:
        fail(f"topic {topic!r} is on none of the brokers that answered ({', '.join(without)}); "
             "keybus topics list --broker ADDRESS shows what one holds")
    for address in without:
        note(f"{address} holds no topic {topic!r}")


@cluster.command("dev")
@click.option("--brokers", "count", default=3, show_default=True, type=click.IntRange(1, 9),
              help="How many brokers to start.")
@click.option("--dir", "root", default="./keybus-cluster", show_default=True,
              help="Everything goes under this directory (data, configs, logs).")
@click.option("--acks", default=None, help="leader or a number of followers, at most "
              "--brokers - 1  [default: 1; leader with --brokers 1]")
@click.option("--topic", default="demo", show_default=True, callback=checked_name,
              help="A topic to create at start.")
@click.option("--base-port", default=6650, show_default=True, type=click.IntRange(1, 65000),
              help="Brokers listen on this port and the next ones (a restart keeps its ids).")
@click.option("--zookeeper-port", default=DEFAULT_ZOOKEEPER_PORT, show_default=True,
              type=click.IntRange(1, 65535), help="ZooKeeper's client port.")
@click.option("--exit", "exit_after", is_flag=True, help="Stop again once a leader is elected.")
@json_option
def dev(count: int, root: str, acks: str | None, topic: str, base_port: int,
        zookeeper_port: int, exit_after: bool, as_json: bool) -> None:
    """Start ZooKeeper and N brokers on 127.0.0.1 (installing ZooKeeper when missing),
    print how to reach them, and keep them running until Ctrl-C. SIGTERM and SIGHUP
    stop them too (exit 143 and 129: 128 + the signal)."""
    acks = acks or ("1" if count > 1 else "leader")  # one broker has no follower to copy
    check_acks(acks, count)
    _ensure_zookeeper()
    base = Path(root).resolve()
    try:
        base.mkdir(parents=True, exist_ok=True)
        claim = _claim_dir(base)  # held until this process ends: another dev sees it
    except OSError as e:  # not a directory, or one this user cannot create or write
        raise click.UsageError(f"cannot use --dir {root}: {e.strerror or e} "
                               f"({e.filename or base}); give a directory this user can "
                               "create and write") from None
    # Checked first: a taken port ends ZooKeeper with a Java log tail that never names it.
    if not port_free(zookeeper_port):
        fail(f"cannot listen on 127.0.0.1:{zookeeper_port} for ZooKeeper: the port is in use "
             f"(another ZooKeeper? {DEFAULT_ZOOKEEPER_PORT} is its default); choose another "
             "with --zookeeper-port N")
    zookeeper = ZooKeeperServer(base / "zookeeper", zookeeper_port)
    runners: list[BrokerRunner] = []
    failure = ""
    stopped_by = 0
    with stop_signals_raise():
        try:
            _start_and_serve(zookeeper, runners, base, count, acks, topic, base_port,
                             exit_after, as_json)
        except KeyboardInterrupt:
            pass
        except Stopped as e:
            stopped_by = e.signum
        except (RuntimeError, TimeoutError) as e:  # a process that did not start
            failure = f"{_first_and_last_line(str(e))} (logs under {base})"
        finally:
            for runner in runners:
                runner.stop()
            zookeeper.stop()
            with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
                (note if as_json else click.echo)(
                    "stopped ZooKeeper and the brokers; data stays in " + str(base))
    claim.close()
    if failure:
        fail(failure)
    if stopped_by:
        sys.exit(128 + stopped_by)


def _claim_dir(base: Path) -> IO[str]:
    """Lock `base` for this `cluster dev` (flock on base/cluster-dev.lock, holding its
    pid), or exit 1 naming who uses it. Why: a second `cluster dev` on the directory
    of a running cluster (another --base-port, say) rewrote its brokers' configs and
    ZooKeeper's before its own brokers failed on the data directories' locks, and
    started a ZooKeeper on the running one's data; the documented restart command of
    a killed broker then pointed at a ZooKeeper that never ran. The brokers' RocksDB
    locks are checked too: they outlive a `cluster dev` killed with SIGKILL."""
    lock = (base / "cluster-dev.lock").open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        pid = lock.read().strip() or "?"
        lock.close()
        fail(f"{base} is in use by another keybus cluster dev (pid {pid}); stop it (Ctrl-C "
             "there) or choose another --dir")
    held = [path.parent.parent.name for path in sorted(base.glob("broker-*/log.rocksdb/LOCK"))
            if _locked(path)]
    if held:
        lock.close()
        fail(f"{base} is in use: the data of {', '.join(held)} is held by a running broker "
             "(left by a keybus cluster dev that was killed?); stop it (kill PID, see "
             f"{base}/broker-N.log) or choose another --dir")
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def _locked(path: Path) -> bool:
    """Another process holds RocksDB's lock on `path` (a POSIX record lock)."""
    try:
        file = path.open("r+")
    except OSError:
        return False  # gone meanwhile, or not ours to lock: the broker's start says more
    with file:
        try:
            fcntl.lockf(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
    return False


def _start_and_serve(zookeeper: ZooKeeperServer, runners: list[BrokerRunner], base: Path,
                     count: int, acks: str, topic: str, base_port: int, exit_after: bool,
                     as_json: bool) -> None:
    """Start everything, say how to reach it, serve until the brokers are gone (at once
    with --exit). `runners` gets the brokers once started, for the caller to stop."""
    zookeeper.start()
    runners.extend(start_cluster(base, count, zookeeper.address, acks,
                                 [base_port + i for i in range(count)],
                                 extra={"relay_retry_backoff_max_ms": 2000}))
    addresses = ",".join(r.address for r in runners)
    leader = run(_create_and_elect(addresses, runners[0].address, topic))
    if as_json:
        print_json(_how_to_dict(zookeeper, runners, addresses, topic, leader, base))
    else:
        _print_how_to(zookeeper, runners, addresses, topic, leader, base)
    if not exit_after:
        while any(r.running() for r in runners):
            time.sleep(1)


def check_acks(acks: str, count: int) -> None:
    """--acks fits --brokers: a leader and at least `acks` followers. Why: a cluster
    that can never hold the copies asked for acknowledges nothing, after a 30 s wait.

    Raises:
        click.UsageError: naming --acks, what was given and what is allowed (exit 2).
    """
    allowed = f"allowed with --brokers {count}: leader or 0..{count - 1}"
    try:
        followers = parse_acks("--acks", acks)
    except ReplicationError:
        raise click.UsageError(f"--acks {acks!r} is invalid; {allowed}") from None
    if followers > count - 1:
        raise click.UsageError(f"--acks {followers} needs {followers} followers besides the "
                               f"leader, {followers + 1} brokers; {allowed}")


def _first_and_last_line(text: str) -> str:
    """`broker exited with 1: <log tail>` as one line: what exited and the log's last line."""
    what, _, log_tail = text.partition(": ")
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    return f"{what}: {lines[-1]}" if lines else " ".join(text.split())


async def _create_and_elect(addresses: str, first: str, topic: str) -> str:
    async with Admin(first) as admin:
        with contextlib.suppress(errors.AlreadyExists):
            await admin.create_topic(topic)
    return await find_leader(split_brokers(addresses), topic, timeout_ms=30_000)


def _how_to_dict(zookeeper: ZooKeeperServer, runners: list[BrokerRunner], addresses: str,
                 topic: str, leader: str, base: Path) -> dict[str, object]:
    return {"zookeeper": zookeeper.address,
            "zookeeper_pid": zookeeper.process.pid if zookeeper.process else 0,
            "brokers": addresses, "topic": topic, "leader": leader, "dir": str(base),
            "processes": [{"address": r.address, "pid": r.pid, "log": str(r.log_path),
                           "config": str(r.config), "data_dir": str(r.data_dir)}
                          for r in runners]}


def _print_how_to(zookeeper: ZooKeeperServer, runners: list[BrokerRunner], addresses: str,
                  topic: str, leader: str, base: Path) -> None:
    click.echo(f"ZooKeeper   {zookeeper.address} (pid {zookeeper.process.pid if zookeeper.process else 0})")
    for runner in runners:
        role = "leader of " + topic if runner.address == leader else "follower"
        click.echo(f"broker      {runner.address} (pid {runner.pid}, {role}), log {runner.log_path}")
    click.echo(f"""
Everything lives under {base}. Try:
  keybus cluster status --broker {addresses}
  echo '{{"key": 1, "value": "hello"}}' | keybus produce {topic} --broker {addresses}
  kill -9 {next((r.pid for r in runners if r.address == leader), 0)}   # the leader: a follower takes over
  keybus cluster status --broker {addresses}
Start a killed broker again (it rejoins as a follower):""")
    for runner in runners:
        click.echo(f"  keybus broker --config {runner.config} --data-dir {runner.data_dir} "
                   f"--host 127.0.0.1 --port {runner.port}")
    click.echo("Ctrl-C stops everything.")


def _ensure_zookeeper() -> None:
    """Install Debian's zookeeper (and Java) when missing, or say how."""
    missing = [package for package, present in (("zookeeper", ZOOKEEPER_JAR.exists()),
                                                ("openjdk-17-jre-headless", bool(shutil.which("java"))))
               if not present]
    if not missing:
        return
    click.echo(f"installing {' '.join(missing)} (Debian packages)", err=True)
    done = subprocess.run(["apt-get", "install", "-y", "-qq", *missing], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        fail(f"cannot install {' '.join(missing)}: {done.stderr.strip()[-300:] or done.returncode}; "
             f"install them (apt-get install {' '.join(missing)}) and run again")


def register(cli: click.Group) -> None:
    cli.add_command(cluster)

