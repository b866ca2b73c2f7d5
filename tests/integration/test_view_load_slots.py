"""A follower loading its views holds at most `view_loads_max` of its upstream's
bootstrap slots, so consumers bootstrapping from the upstream meanwhile are served.

Goal: a fresh follower of a topic whose leader's retention removed its first
offsets marks every partition's view to be loaded from the leader's
(broker/view/load.py); each load is a Bootstrap on the leader and holds one of
its `bootstrap_streams_max` slots while the follower writes the snapshot.
Before, every partition loaded at once: a follower of a topic with as many
partitions as the leader has slots held all of them, for as long as its one
view thread took to write every view (measured: 8 partitions of 200,000 keys,
8 slots, consumers refused with RESOURCE_EXHAUSTED for 2 s while a consumer's
own bootstrap of one partition takes 0.45 s), and its own loads were refused
too. Now loads take turns (`view_loads_max`, 1 by default).

Method: a leader process with 2 bootstrap slots and a topic of 4 partitions,
each holding 50,000 keys of which the log keeps only the last ones; a new
follower process; while it loads, a consumer bootstraps partition 0 on the
leader again and again (one at a time). Every wait is bounded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from keybus.dev_cluster import BrokerRunner, free_port
from sdk.core.pb import keybus_pb2 as pb
from tests.support.relay_cluster import wait_for
from tests.support.wire import int_batch, stub

PARTITIONS, KEYS = 4, 50_000


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[BrokerRunner]:
    config = tmp_path / "leader.toml"
    config.write_text("retention_check_interval_ms = 100\nview_linger_ms = 200\n"
                      "bootstrap_streams_max = 2\n[replication.t]\n")
    runner = BrokerRunner(tmp_path / "leader", free_port(), config)
    runner.start()
    try:
        yield runner
    finally:
        runner.kill()


def fill(address: str) -> None:
    """KEYS keys per partition; wait until the log starts past 0 and the view holds all."""
    client = stub(address)
    client.CreateTopic(pb.CreateTopicRequest(topic="t", config=pb.TopicConfig(
        partitions=PARTITIONS, retention_bytes=300_000)), timeout=10)
    for partition in range(PARTITIONS):
        for first in range(0, KEYS, 2_000):
            list(client.Produce(iter([pb.ProduceRequest(topic="t", partition=partition,
                                                         batch=int_batch(list(range(
                                                             first, first + 2_000)),
                                                             b"x" * 100))]), timeout=60))

    def trimmed() -> bool:
        info = client.DescribeTopic(pb.DescribeTopicRequest(topic="t"), timeout=5)
        return all(p.start_offset > 0 and p.view_offset == p.end_offset == KEYS
                   for p in info.partitions)
    wait_for(trimmed, 60, "the leader's views hold every key and its logs were trimmed")


class Prober:
    """Bootstraps t/0 on the leader one at a time (each ends after its first message)."""

    def __init__(self, address: str) -> None:
        self.client = stub(address)
        self.answers: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                call = self.client.Bootstrap(pb.BootstrapRequest(topic="t", stop_offset=1),
                                             timeout=10)
                next(call)
                call.cancel()
                self.answers.append("served")
            except grpc.RpcError as e:
                self.answers.append(f"{e.code().name}: {e.details()}")
            time.sleep(0.02)

    def stop(self) -> list[str]:
        self.stopping.set()
        self.thread.join(15)
        return self.answers


def test_a_follower_loading_many_views_leaves_the_leaders_slots_to_consumers(
        tmp_path: Path, leader: BrokerRunner) -> None:
    fill(leader.address)
    config = tmp_path / "follower.toml"
    config.write_text("relay_retry_backoff_ms = 50\nrelay_retry_backoff_max_ms = 500\n"
                      f'[replication.t]\nupstream = "{leader.address}"\n')
    follower = BrokerRunner(tmp_path / "follower", free_port(), config)
    prober = Prober(leader.address)
    try:
        follower.start()
        wait_for(lambda: follower.log_path.read_text().count("loaded from upstream")
                 == PARTITIONS, 120, "every view loaded")
        answers = prober.stop()
        refused = [a for a in answers if a != "served"]
        log = follower.log_path.read_text()
        failed = [line for line in log.splitlines() if "loading it failed" in line]
        print(f"{len(answers)} consumer bootstraps during the loads, {len(refused)} refused; "
              f"{len(failed)} failed loads")
        assert not failed, failed[0]
        assert answers and not refused, refused[0]
    finally:
        prober.stop()
        follower.kill()
