"""`keybus cluster status` and the leader's metrics show how many followers follow it.

Goal: on a topic with `acks = 2` an operator sees, before a produce is refused
(`followers_missing`, broker/relay/acks.py rules 4-5), how many followers
follow each partition's leader: "2/2" with every follower up; still "2/2" with
one paused (its connection stays open: a paused follower follows, as the
rules say, so its produces wait for copies rather than being refused); "1/2"
once one is killed and the leader has seen its stream close and its grace
(`relay_follower_grace_ms`, here 1 s) passed; "2/2" again once it is back. The gauge `keybus_relay_followers_following` says the same.

Method: three `python -m broker` processes (`keybus.dev_cluster`) with a 2 s
ZooKeeper session; the real `keybus cluster status` command run in-process
through click's CliRunner (its gRPC calls are real), as JSON and as the
table; the leader's metrics over HTTP; SIGSTOP/SIGCONT and SIGKILL on one
follower. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from keybus.cli.main import cli
from keybus.cli.render_cluster import HEADERS
from keybus.dev_cluster import BrokerRunner, cluster_config, free_port
from tests.support.metrics import metrics_text
from tests.support.relay_cluster import cluster_story, wait_for, wait_settled
from tests.support.wire import create_topic, stub
from tests.support.zookeeper import ZooKeeperServer, zookeeper_running

SESSION_MS = 2_000


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with zookeeper_running(tmp_path_factory.mktemp("zookeeper") / "zk") as server:
        yield server


def cluster(root: Path, zookeeper: str) -> list[BrokerRunner]:
    """Three brokers with acks = 2, each with its own metrics port (start_cluster gives
    every broker one config; the caller kills them, started or not)."""
    brokers = []
    for i in range(3):
        config = root / f"broker-{i + 1}.toml"
        config.write_text(cluster_config(zookeeper, 2, SESSION_MS, {
            "zookeeper_root": "/keybus-test/following", "relay_retry_backoff_max_ms": 500,
            "relay_sync_interval_ms": 200, "relay_follower_grace_ms": 1_000,
            "metrics_port": free_port()}))
        brokers.append(BrokerRunner(root / f"broker-{i + 1}", free_port(), config))
    return brokers


def status(brokers: list[BrokerRunner], *options: str) -> str:
    """`keybus cluster status` of topic t over every broker (1 s per broker: one is paused)."""
    addresses = ",".join(b.address for b in brokers)
    result = CliRunner().invoke(cli, ["cluster", "status", "--broker", addresses, "--topic", "t",
                                      "--timeout", "1", *options])
    assert result.exit_code == 0, result.output
    return result.output


def following(brokers: list[BrokerRunner]) -> list[int | None]:
    """The leader's followers_following per partition, from `cluster status --json`."""
    topics: list[dict[str, Any]] = json.loads(status(brokers, "--json"))["topics"]
    leaders = [b for t in topics for b in t["brokers"] if b["role"] == "leader" and b["writable"]]
    if len(leaders) != 1:
        return []
    return [p["followers_following"] for p in leaders[0]["partitions"]]


def table_cells(brokers: list[BrokerRunner]) -> dict[str, str]:
    """Broker address -> its `following` cell in the table (--wide: one line per row)."""
    column = HEADERS.index("following")
    return {cells[1]: cells[column] for cells in map(str.split, status(brokers, "--wide")
                                                     .splitlines())
            if len(cells) == len(HEADERS) and cells[0] == "t"}


def gauge(port: int, partition: int) -> str | None:
    series = f'keybus_relay_followers_following{{partition="{partition}",topic="t"}}'
    found = re.search(rf"^{re.escape(series)} (\S+)$", metrics_text(port), re.MULTILINE)
    return found[1] if found else None


def test_status_and_metrics_count_the_followers_that_follow(zookeeper: ZooKeeperServer,
                                                           tmp_path: Path) -> None:
    brokers = cluster(tmp_path, zookeeper.address)
    paused: BrokerRunner | None = None
    try:
        for broker in brokers:
            broker.start()
        create_topic(stub(brokers[0].address), "t", partitions=2)
        leader_index = wait_settled(brokers, "t", followers=2)
        leader = brokers[leader_index]
        first, second = [b for i, b in enumerate(brokers) if i != leader_index]
        port = int(re.findall(r"metrics_port = (\d+)", leader.config.read_text())[0])
        wait_for(lambda: following(brokers) == [2, 2], 15, "both followers follow")
        cells = table_cells(brokers)
        assert cells == {leader.address: "2/2", first.address: "-", second.address: "-"}, cells
        wait_for(lambda: gauge(port, 0) == gauge(port, 1) == "2.0", 5, "the gauge says 2")

        os.kill(first.pid, signal.SIGSTOP)
        paused = first
        time.sleep(1.5)  # past a metrics interval: its stream is open, it still follows
        assert following(brokers) == [2, 2]
        assert gauge(port, 0) == "2.0"
        os.kill(first.pid, signal.SIGCONT)
        paused = None

        second.kill()  # its report stream closes with its process; 1 s later its grace ends
        took = wait_for(lambda: following(brokers) == [1, 1], 10, "the leader sees one follow")
        print(f"following 1/2 shown {took:.2f} s after a follower was killed")
        assert table_cells(brokers)[leader.address] == "1/2"
        wait_for(lambda: gauge(port, 0) == gauge(port, 1) == "1.0", 5, "the gauge says 1")

        second.start()
        took = wait_for(lambda: following(brokers) == [2, 2], 30, "the follower is back")
        print(f"following 2/2 again {took:.2f} s after the follower restarted")
        assert table_cells(brokers)[leader.address] == "2/2"
        wait_for(lambda: gauge(port, 0) == "2.0", 5, "the gauge says 2 again")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{cluster_story(brokers, 't')}") from None
    finally:
        if paused is not None:
            os.kill(paused.pid, signal.SIGCONT)
        for b in brokers:
            b.kill()
