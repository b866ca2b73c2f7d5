"""A leader that loses ZooKeeper: it stops in bounded time and tells its producers why.

Goal: with ZooKeeper gone, a leader given SIGTERM exits within
`leader_handover_timeout_ms` plus a session timeout, giving up the
resignation it cannot record (the session's expiry frees its leader node).
Method: Debian's ZooKeeper (installed when missing) on a free 127.0.0.1 port,
its own per test (it is stopped); `python -m broker` processes from
`keybus.dev_cluster`. The follower is killed and one more event stored on the
leader, so no follower holds its whole log and the handover wait would run its
full length; ZooKeeper stops during that wait. Every wait is bounded.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from keybus.dev_cluster import BrokerRunner, start_cluster
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb
from tests.support.relay_cluster import cluster_story, wait_settled
from tests.support.wire import create_topic, produce, stub
from tests.support.zookeeper import ZooKeeperServer, zookeeper_running

SESSION_MS = 2_000
HANDOVER_MS = 10_000  # longer than ZooKeeper takes to stop: the loss comes during the wait


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    with zookeeper_running(tmp_path / "zk") as server:
        yield server


@pytest.fixture
def brokers(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[list[BrokerRunner]]:
    runners = start_cluster(tmp_path, 2, zookeeper.address, "leader",
                            session_timeout_ms=SESSION_MS, extra={
                                "relay_retry_backoff_max_ms": 500,
                                "leader_handover_timeout_ms": HANDOVER_MS})
    try:
        yield runners
    finally:
        for runner in runners:
            runner.kill()


def test_sigterm_without_zookeeper_stops_within_the_bound(zookeeper: ZooKeeperServer,
                                                          brokers: list[BrokerRunner]) -> None:
    create_topic(stub(brokers[0].address), "t")
    leader = brokers[wait_settled(brokers, "t", followers=1)]
    follower = next(b for b in brokers if b is not leader)
    follower.kill()
    batch = pb.EventBatch(count=1, key_ints=[7], slots=slots_of([7]), values=[b"last"])
    (answer,) = produce(stub(leader.address), [pb.ProduceRequest(topic="t", batch=batch,
                                                                 request_id=1)])
    assert not answer.error_code, answer.error_message  # acks=leader: on the leader alone
    assert leader.process is not None
    leader.process.send_signal(signal.SIGTERM)
    began = time.monotonic()
    zookeeper.stop()
    bound_s = (HANDOVER_MS + SESSION_MS) / 1000 + 5
    try:
        code = leader.process.wait(bound_s)
    except Exception:
        pytest.fail(f"the leader did not exit within {bound_s} s of SIGTERM:\n"
                    f"{cluster_story(brokers, 't')}")
    took = time.monotonic() - began
    print(f"leader exited {took:.2f} s after SIGTERM with ZooKeeper gone")
    assert code == 0
    text = leader.log_path.read_text()
    assert "not resigning: the ZooKeeper session is" in text or \
        "resignation not recorded" in text, text[-3000:]
