"""A follower whose report stream closes for a moment keeps counting for `acks = n`.

Goal: with `acks = 1`, a follower's position-report stream that ends and comes
back (here: its broker killed and started again at once, as a crash-restart or
a rolling restart does; a token expiry or a network blip end the stream the
same way) does not make the leader refuse produce with `followers_missing`:
for `relay_follower_grace_ms` the follower still counts (broker/relay/acks.py
rule 4, Kafka's `replica.lag.time.max.ms`), produces meanwhile are stored and
answered once the follower is back and copied them, and `DescribeCluster`
shows it following. A follower gone for good stops counting once the grace is
over: a produce in the grace waits for its copy (answered `acks_timeout`),
one after it is refused at once, storing nothing. The leader logs one line
when the follower stops following (a WARNING: produce is refused) and one
when it follows again, never one per produce; `DescribeCluster` and `keybus
cluster status` show how much of its grace is left.

Method: a real leader and follower broker process (static leadership, no
ZooKeeper); the follower is killed with SIGKILL (its stream to the leader
closes with its process) and started again on the same data directory; raw
gRPC produces and DescribeCluster on the leader. Every wait is bounded.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner

from keybus.cli.main import cli
from keybus.dev_cluster import BrokerRunner, free_port
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb
from tests.support.relay_cluster import records, role, wait_for
from tests.support.wire import create_topic, stub

ACKS_TIMEOUT_MS = 20_000


def produce(address: str, key: int) -> str:
    """One raw produce of one event to t/0: 'acknowledged' or the error's words."""
    batch = pb.EventBatch(count=1, key_ints=[key], slots=slots_of([key]), values=[b"%d" % key])
    try:
        for answer in stub(address).Produce(iter([pb.ProduceRequest(
                topic="t", partition=0, batch=batch, request_id=1)]), timeout=30):
            return "acknowledged" if not answer.error_code else answer.error_message
    except grpc.RpcError as e:
        return f"{e.code().name}: {e.details()}"
    return "no answer"


def following(leader: BrokerRunner) -> int | None:
    info = role(leader.address, "t")
    return info.partitions[0].followers_following if info is not None else None


def log_end(broker: BrokerRunner) -> int:
    info = role(broker.address, "t")
    assert info is not None
    return info.partitions[0].log_end_offset


class Pair:
    def __init__(self, root: Path, grace_ms: int, acks_timeout_ms: int) -> None:
        leader_config = root / "leader.toml"
        leader_config.write_text(f"relay_follower_grace_ms = {grace_ms}\n"
                                 f"acks_timeout_ms = {acks_timeout_ms}\n"
                                 "[replication.t]\nacks = 1\n")
        self.leader = BrokerRunner(root / "leader", free_port(), leader_config)
        follower_config = root / "follower.toml"
        follower_config.write_text("relay_retry_backoff_max_ms = 500\n"
                                   f'[replication.t]\nupstream = "{self.leader.address}"\n')
        self.follower = BrokerRunner(root / "follower", free_port(), follower_config)

    def start(self) -> None:
        """Both brokers, topic t, and one event acknowledged through the follower."""
        self.leader.start()
        self.follower.start()
        create_topic(stub(self.leader.address), "t")
        wait_for(lambda: following(self.leader) == 1, 15, "the follower follows")
        assert produce(self.leader.address, 0) == "acknowledged"


MakePair = Callable[[int, int], Pair]


@pytest.fixture
def make_pair(tmp_path: Path) -> Iterator[MakePair]:
    """make_pair(grace_ms, acks_timeout_ms): a started pair, killed after the test."""
    made: list[Pair] = []

    def make(grace_ms: int, acks_timeout_ms: int) -> Pair:
        pair = Pair(tmp_path, grace_ms, acks_timeout_ms)
        made.append(pair)
        pair.start()
        return pair
    try:
        yield make
    finally:
        for pair in made:
            pair.follower.kill()
            pair.leader.kill()


def test_a_follower_restarted_at_once_refuses_no_produce_meanwhile(make_pair: MakePair) -> None:
    pair = make_pair(15_000, ACKS_TIMEOUT_MS)
    leader = pair.leader
    pair.follower.kill()  # its report stream to the leader closes with its process
    time.sleep(0.3)  # the leader sees the connection reset: well within this
    assert following(leader) == 1  # in its grace, and shown so
    answers: dict[int, str] = {}
    threads = [threading.Thread(target=lambda k=key: answers.__setitem__(k, produce(
        leader.address, k))) for key in (1, 2, 3)]
    for thread in threads:  # during the gap: stored, waiting for the copy
        thread.start()
        time.sleep(0.1)
    restarted = pair.follower.start()
    for thread in threads:
        thread.join(30)
    print(f"follower back after {restarted:.2f} s; answers in the gap: {answers}")
    assert answers == dict.fromkeys((1, 2, 3), "acknowledged"), answers
    assert produce(leader.address, 4) == "acknowledged"
    assert sorted(int(v) for r in records(leader.address, "t") for v in r.batch.values) == \
        [0, 1, 2, 3, 4]


def test_a_follower_gone_for_good_stops_counting_after_the_grace(make_pair: MakePair) -> None:
    grace_ms = 2_000
    pair = make_pair(grace_ms, 1_000)  # acks_timeout_ms: a produce in the grace waits that
    leader = pair.leader
    killed = time.monotonic()
    pair.follower.kill()
    time.sleep(0.3)
    waited = produce(leader.address, 1)  # in the grace: stored, its copy never comes
    assert "acks_timeout_ms=1000" in waited, waited
    wait_for(lambda: following(leader) == 0, 10, "the follower stops counting")
    took = time.monotonic() - killed
    print(f"the follower stopped counting {took:.2f} s after its kill (grace {grace_ms} ms)")
    assert took >= grace_ms / 1000, took
    end = log_end(leader)
    began = time.monotonic()
    refused = produce(leader.address, 2)
    assert refused.startswith(f"topic 't' has acks=1, so 1 follower(s) must copy each event "
                              f"from its leader {leader.address}, but 0 follow it now; "
                              "nothing of this produce to partition 0 was stored"), refused
    assert time.monotonic() - began < 0.9  # at once: a stored produce waits acks_timeout (1 s)
    assert log_end(leader) == end  # nothing stored


def log_lines(broker: BrokerRunner, words: str) -> list[str]:
    return [line for line in broker.log_path.read_text().splitlines() if words in line]


def status(leader: BrokerRunner, *options: str) -> str:
    """`keybus cluster status` of topic t on the leader (its gRPC calls are real)."""
    result = CliRunner().invoke(cli, ["cluster", "status", "--broker", leader.address,
                                      "--topic", "t", "--wide", "--timeout", "20", *options])
    assert result.exit_code == 0, result.output
    return result.output


def grace_left(leader: BrokerRunner) -> float:
    """The follower's grace_left_s in `cluster status --json`."""
    topics = json.loads(status(leader, "--json"))["topics"]
    [follower] = topics[0]["brokers"][0]["followers"]
    return float(follower["grace_left_s"])


def follower_state(leader: BrokerRunner) -> tuple[str, float | None]:
    """The follower's (state, stopped_s_ago) in `cluster status --json`."""
    topics = json.loads(status(leader, "--json"))["topics"]
    [follower] = topics[0]["brokers"][0]["followers"]
    return follower["state"], follower["stopped_s_ago"]


def test_the_leader_logs_each_change_of_who_follows_and_shows_the_grace(make_pair: MakePair
                                                                          ) -> None:
    pair = make_pair(3_000, 1_000)
    leader, who = pair.leader, f"follower {pair.follower.address}"
    assert grace_left(leader) == 0 and follower_state(leader) == ("following", None)
    assert len(log_lines(leader, "INFO keybus.relay topic t/0: " + who + " follows; 1 "
                         "follow(s) now, acks=1 needs 1")) == 1
    pair.follower.kill()
    time.sleep(0.3)
    info = role(leader.address, "t")
    assert info is not None and 2_000 < info.followers[0].grace_left_ms <= 3_000
    assert 2.0 < grace_left(leader) <= 3.0
    assert "1/1 (1 in grace, " in status(leader)
    assert follower_state(leader)[0] == "in_grace"
    wait_for(lambda: log_lines(leader, "stopped following"), 6, "the line when it stops")
    assert following(leader) == 0 and grace_left(leader) == 0
    for key in (1, 2, 3):  # refused: one line for the change, none per produce
        assert "but 0 follow it now" in produce(leader.address, key)
    time.sleep(1.2)  # the leader's timer looks once a second
    # gone for good: said so (grace_left 0 alone read as connected), and since when
    state, stopped_s_ago = follower_state(leader)
    assert state == "stopped" and stopped_s_ago is not None and 1.0 <= stopped_s_ago < 30
    assert f"t on {leader.address}: follower " in status(leader)
    assert f"({pair.follower.address}) stopped following partition(s) 0 " in status(leader)
    [stopped] = log_lines(leader, "stopped following")
    assert f"WARNING keybus.relay topic t/0: {who} stopped following (its report stream " \
           "closed 3000 ms ago (relay_follower_grace_ms) and it did not come back); 0 " \
           "follow(s) now, acks=1 needs 1: produce to this partition is refused " \
           "(followers_missing) until one is back" in stopped, stopped
    pair.follower.start()
    wait_for(lambda: len(log_lines(leader, who + " follows")) == 2, 15, "the line when back")
    assert following(leader) == 1 and grace_left(leader) == 0
    assert follower_state(leader) == ("following", None)
    assert "stopped following" not in status(leader)
    assert "enough follow: produce is taken" in log_lines(leader, who + " follows")[1]
