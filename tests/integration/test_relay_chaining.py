"""Relay chaining with static configuration: a broker that follows a broker (no ZooKeeper).

Goal: a follower holds the leader's records with the same offsets, SCNs,
windows, publish times and producer state, honours filters for its own
readers, carries subscription cursors, refuses produce naming the leader,
and an upstream that is down is retried with capped backoff until the copy
catches up; `keybus cluster status` shows no lag for a copy that never read
and says why it cannot.

Method: real broker processes on 127.0.0.1 with config files; the leader is
written to through the SDK and the wire; both logs are read back and
compared record by record. Bounded waits only.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from keybus.dev_cluster import BrokerRunner, free_port
from sdk import Admin, Consumer, Producer, errors
from sdk.core.columns import keys_of
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.subscription_admin import SubscriptionAdmin
from tests.support.metrics import metrics_text
from tests.support.relay_cluster import events, records, role, wait_for
from tests.support.security import SUPERUSER, TOKENS, SecureSetup
from tests.support.wire import create_topic, stub


def broker(root: Path, name: str, config: str, port: int | None = None) -> BrokerRunner:
    path = root / f"{name}.toml"
    path.write_text(config)
    return BrokerRunner(root / name, port or free_port(), path)


def same(a: pb.Record, b: pb.Record) -> bool:
    return (a.base_offset, a.scn_first, a.window, a.publish_time_ms, a.producer_id, a.sequence,
            keys_of(a.batch), list(a.batch.values)) == \
        (b.base_offset, b.scn_first, b.window, b.publish_time_ms, b.producer_id, b.sequence,
         keys_of(b.batch), list(b.batch.values))


@pytest.fixture
def pair(tmp_path: Path):  # type: ignore[no-untyped-def]
    leader = broker(tmp_path, "leader", '[replication.t]\nacks = 1\n')
    follower = broker(tmp_path, "follower", f'relay_sync_interval_ms = 200\n'
                      f'metrics_port = {free_port()}\n'
                      f'[replication.t]\nupstream = "{leader.address}"\n')
    try:
        leader.start()
        follower.start()
        yield leader, follower
    finally:
        follower.stop()
        leader.stop()


async def produce_mix(address: str) -> None:
    """Plain batches from an idempotent producer and windows with supplied SCNs."""
    async with await Producer.create(address, "t") as producer:
        await (await producer.send_batch(list(range(300)), [b"v%d" % k for k in range(300)]))
        for i in range(5):
            await producer.send_window([{"key": 1000 + i * 10 + j, "value": b"w"} for j in range(10)],
                                       partition=i % 2, scn=10_000 + i)


async def consume_some(address: str) -> None:
    async with await Consumer.subscribe(address, "t", "ks", type="key_shared",
                                        start="earliest") as consumer:
        for _ in range(50):
            consumer.ack(await consumer.receive(timeout_s=10))
        await consumer.flush_acks()


def test_follower_holds_the_leaders_records_window_by_window(pair) -> None:  # type: ignore[no-untyped-def]
    leader, follower = pair
    create_topic(stub(leader.address), "t", partitions=2)
    asyncio.run(produce_mix(leader.address))
    for partition in (0, 1):
        wait_for(lambda p=partition: len(records(follower.address, "t", p)) ==
                 len(records(leader.address, "t", p)), 15, "the follower copied partition")
        mine, theirs = records(follower.address, "t", partition), records(leader.address, "t", partition)
        assert mine and all(same(a, b) for a, b in zip(mine, theirs, strict=True))
        assert any(r.window for r in mine) and any(r.producer_id for r in mine)
    # Filters are the follower's own: a filtered read there equals one on the leader.
    read = pb.ReadRequest(topic="t", partition=0, start=pb.StartPosition(earliest=True),
                          filter=pb.KeyFilter(type=pb.KeyFilter.MOD, mod_num_buckets=3,
                                              mod_buckets="[1]"))
    filtered = [[keys_of(r.batch) for m in stub(b.address).Read(read, timeout=10) for r in m.records]
                for b in (leader, follower)]
    assert filtered[0] == filtered[1] and filtered[0]
    # Cursors travel: the follower gets the subscription and its mark-delete.
    asyncio.run(consume_some(leader.address))

    async def cursors(address: str) -> dict[int, int]:
        async with SubscriptionAdmin(address) as admin:
            infos = await admin.list_subscriptions("t")
        return {p.partition: p.mark_delete for i in infos for p in i.partitions}
    wanted = asyncio.run(cursors(leader.address))
    assert sum(wanted.values()) >= 1
    wait_for(lambda: asyncio.run(cursors(follower.address)) == wanted, 15, "cursors copied")
    # The follower's metrics look like a broker's, plus the copy's lag and silence.
    port = int(re.findall(r"metrics_port = (\d+)", follower.config.read_text())[0])
    wait_for(lambda: 'keybus_relay_follower_lag_events{partition="0",topic="t"} 0.0' in
             metrics_text(port), 10, "lag metric")
    age = re.search(r'keybus_relay_seconds_since_upstream_read\{partition="1",topic="t"\} (\S+)',
                    metrics_text(port))
    assert age is not None and 0 <= float(age[1]) < 60
    assert 'keybus_relay_copied_events_total{topic="t"}' in metrics_text(port)


def test_a_follower_of_an_empty_topic_knows_its_lag_once_its_upstream_answered(
        pair) -> None:  # type: ignore[no-untyped-def]
    """An empty upstream topic answers the copy at once (its end, 0): the follower heard
    it, so its lag is known, 0, and it is heard again each second while nothing comes;
    a follower that never heard its upstream has no lag series (test_relay_metrics.py,
    and `-` in cluster status: test_a_follower_that_never_copied_shows_no_lag_...)."""
    leader, follower = pair
    create_topic(stub(leader.address), "t")  # nothing in it: the copy reads nothing
    port = int(re.findall(r"metrics_port = (\d+)", follower.config.read_text())[0])
    wait_for(lambda: 'keybus_relay_follower_lag_events{partition="0",topic="t"} 0.0' in
             metrics_text(port), 15, "the lag heard from the empty upstream")
    age = re.search(r'keybus_relay_seconds_since_upstream_read\{partition="0",topic="t"\} (\S+)',
                    metrics_text(port))
    assert age is not None and 0 <= float(age[1]) < 60, age
    asyncio.run(fill_one(leader.address))
    wait_for(lambda: 'keybus_relay_follower_lag_events{partition="0",topic="t"} 0.0' in
             metrics_text(port), 15, "the lag once read")


async def fill_one(address: str) -> None:
    async with await Producer.create(address, "t") as producer:
        await (await producer.send(1, b"x"))


def test_produce_to_a_follower_names_the_leader(pair) -> None:  # type: ignore[no-untyped-def]
    leader, follower = pair
    create_topic(stub(leader.address), "t")
    wait_for(lambda: "t" in [t.topic for t in stub(follower.address).ListTopics(
        pb.ListTopicsRequest(), timeout=5).topics], 15, "the follower created the topic")
    batch = pb.EventBatch(count=1, key_ints=[1], slots=slots_of([1]), values=[b"x"])
    answer = next(iter(stub(follower.address).Produce(
        iter([pb.ProduceRequest(topic="t", batch=batch, request_id=1)]), timeout=10)))
    assert answer.error_code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert f"the leader is {leader.address}" in answer.error_message

    async def via_sdk() -> None:
        async with Admin(follower.address) as admin:  # multi-tenant: it leads its own topics
            await admin.create_topic("own")
        async with await Producer.create(follower.address, "own") as producer:
            assert (await (await producer.send(1, b"mine"))).offset == 0
        with pytest.raises(errors.NotLeader) as raised:
            async with await Producer.create(follower.address, "t") as producer:
                await (await producer.send(1, b"x"))
        assert raised.value.leader == leader.address
        async with await Producer.create(f"{follower.address},{leader.address}", "t") as producer:
            stored = await (await producer.send(1, b"x"))  # several brokers: finds the leader
        assert stored.offset == 0
    asyncio.run(via_sdk())


def test_a_follower_whose_upstream_is_down_retries_with_capped_backoff(tmp_path: Path) -> None:
    upstream_port = free_port()  # nothing listens here yet: "upstream down"
    follower = broker(tmp_path, "follower", 'relay_retry_backoff_ms = 50\n'
                      'relay_retry_backoff_max_ms = 400\n'
                      f'[replication.t]\nupstream = "127.0.0.1:{upstream_port}"\n')
    leader = broker(tmp_path, "leader", "", port=upstream_port)
    try:
        follower.start()
        wait_for(lambda: len(re.findall(r"retry in (\d+) ms", follower.log_path.read_text())) >= 7,
                 20, "seven retries")
        delays = [int(d) for d in re.findall(r"retry in (\d+) ms", follower.log_path.read_text())]
        assert delays[:4] == [50, 100, 200, 400] and max(delays) == 400, delays
        leader.start()
        create_topic(stub(leader.address), "t")

        async def fill() -> None:
            async with await Producer.create(leader.address, "t") as producer:
                await (await producer.send_batch(list(range(1000)), [b"x"] * 1000))
        asyncio.run(fill())
        began = time.monotonic()
        wait_for(lambda: events(follower.address, "t") == 1000, 15, "the follower caught up")
        print(f"caught up {time.monotonic() - began:.2f} s after the upstream had the events")
        assert all(same(a, b) for a, b in zip(records(follower.address, "t"),
                                               records(leader.address, "t"), strict=True))
    finally:
        follower.stop()
        leader.stop()


def test_a_follower_applies_its_topics_retention(tmp_path: Path) -> None:
    fast = "retention_check_interval_ms = 200\n"
    leader = broker(tmp_path, "leader", fast)
    follower = broker(tmp_path, "follower", fast + f'[replication.r]\nupstream = "{leader.address}"\n')
    try:
        leader.start()
        follower.start()
        stub(leader.address).CreateTopic(pb.CreateTopicRequest(
            topic="r", config=pb.TopicConfig(partitions=1, retention_ms=1_000)), timeout=10)

        async def produce(first: int) -> None:
            async with await Producer.create(leader.address, "r") as producer:
                await (await producer.send_batch(list(range(first, first + 100)), [b"x"] * 100))
        asyncio.run(produce(0))
        wait_for(lambda: events(follower.address, "r") == 100, 15, "copied")
        time.sleep(1.2)
        asyncio.run(produce(100))  # the newest record always stays: this one ages the first out

        def start(address: str) -> int:
            info = stub(address).DescribeTopic(pb.DescribeTopicRequest(topic="r"), timeout=5)
            return int(info.partitions[0].start_offset)
        wait_for(lambda: start(follower.address) == 100, 15, "the follower trimmed by its retention")
        info = stub(follower.address).DescribeTopic(pb.DescribeTopicRequest(topic="r"), timeout=5)
        assert info.config.retention_ms == 1_000 and info.partitions[0].end_offset == 200
    finally:
        follower.stop()
        leader.stop()


def test_a_follower_chains_from_a_leader_behind_tls_and_tokens(tmp_path: Path) -> None:
    """The relay_tls_* and relay_token_file settings: a follower reaches a secured
    upstream as a principal (here the superuser; consume and admin on the topic do)."""
    setup = SecureSetup.make(tmp_path / "tls")
    token = tmp_path / "relay.token"
    token.write_text(TOKENS[SUPERUSER])
    leader_config = tmp_path / "leader.toml"
    leader_config.write_text('[replication.s]\nacks = 1\n')
    leader = BrokerRunner(tmp_path / "leader", free_port(), leader_config, *setup.broker_args())
    follower = broker(tmp_path, "follower", f'relay_tls_ca_file = "{setup.path("ca.pem")}"\n'
                      f'relay_token_file = "{token}"\n'
                      f'[replication.s]\nupstream = "{leader.address}"\n')
    try:
        leader.start()
        follower.start()
        answer = _create_and_produce_three(setup, leader.address)
        assert answer.error_code == 0, answer.error_message  # acks=1: the follower's report came
        wait_for(lambda: events(follower.address, "s") == 3, 15, "copied over TLS")
    finally:
        follower.stop()
        leader.stop()


def test_a_follower_that_never_copied_shows_no_lag_and_says_why(tmp_path: Path) -> None:
    """`keybus cluster status` of a follower whose copy cannot start (a TLS upstream, no
    relay_tls_ca_file): its lag is unknown ("-", null), not 0, and its detail note names
    the copy's failure."""
    setup = SecureSetup.make(tmp_path / "tls")
    leader_config = tmp_path / "leader.toml"
    leader_config.write_text("[replication.s]\n")
    leader = BrokerRunner(tmp_path / "leader", free_port(), leader_config, *setup.broker_args())
    follower = broker(tmp_path, "follower", 'relay_retry_backoff_max_ms = 200\n'
                      f'[replication.s]\nupstream = "{leader.address}"\n')
    try:
        leader.start()
        follower.start()
        answer = _create_and_produce_three(setup, leader.address)
        assert answer.error_code == 0, answer.error_message
        create_topic(stub(follower.address), "s")  # its partitions exist; nothing is copied
        said = f"cannot set up the copy from {leader.address}"
        wait_for(lambda: said in (role(follower.address, "s") or pb.TopicRoleInfo()).detail, 15,
                 "the follower's detail names the copy's failure")
        done = subprocess.run([sys.executable, "-m", "keybus", "cluster", "status", "--broker",
                               follower.address, "--topic", "s", "--json", "--timeout", "20"],
                              capture_output=True, text=True, timeout=60, check=True)
        (row,) = json.loads(done.stdout)["topics"][0]["brokers"]
        assert row["role"] == "follower" and said in row["detail"], row
        assert "pass its CA (relay_tls_ca_file in this broker's config)" in row["detail"], row
        assert "--tls-ca" not in follower.log_path.read_text()  # a client's setting, not its
        (partition,) = row["partitions"]
        assert partition.pop("upstream_unreachable_s") >= 0, row  # its setup fails since
        assert partition == {"partition": 0, "end_offset": 0, "lag_events": None,
                             "lag_s": None, "upstream_read_s_ago": None,
                             "followers_following": None}, row
    finally:
        follower.stop()
        leader.stop()


def _create_and_produce_three(setup: SecureSetup, address: str) -> pb.ProduceResponse:
    """Topic "s" on the secured broker at `address`, and one batch of 3 events in it,
    as the superuser; the produce's answer."""
    root = setup.stub(address, SUPERUSER)
    root.CreateTopic(pb.CreateTopicRequest(topic="s"), timeout=10)
    batch = pb.EventBatch(count=3, key_ints=[1, 2, 3], slots=slots_of([1, 2, 3]),
                          values=[b"a", b"b", b"c"])
    (answer,) = root.Produce(iter([pb.ProduceRequest(topic="s", batch=batch)]), timeout=30)
    return answer


def test_a_relay_whose_upstream_port_is_closed_says_so_in_cluster_status(tmp_path: Path) -> None:
    """A new relay against a closed port on 127.0.0.1: it serves, retries, and `keybus
    cluster status` (every topic, no --topic) lists the topic it cannot create yet with
    the copy's failure and unknown lag, not an empty table (exit 0: the broker answered)."""
    closed = f"127.0.0.1:{free_port()}"
    follower = broker(tmp_path, "follower", 'relay_retry_backoff_max_ms = 200\n'
                      f'[replication.t]\nupstream = "{closed}"\n')
    try:
        follower.start()
        wait_for(lambda: "cannot set up the copy" in follower.log_path.read_text(), 15,
                 "the follower tried its upstream")
        command = [sys.executable, "-m", "keybus", "cluster", "status", "--broker",
                   follower.address, "--timeout", "20"]
        done = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=60,
                              check=True)
        (topic,) = json.loads(done.stdout)["topics"]
        (row,) = topic["brokers"]
        assert topic["topic"] == "t" and row["role"] == "follower", topic
        assert f"cannot set up the copy from {closed}" in row["detail"], row
        table = subprocess.run([*command, "--wide"], capture_output=True, text=True, timeout=60,
                               check=True).stdout
        (line,) = [line for line in table.splitlines() if line.split()[:2] == ["t", follower.address]]
        assert line.split()[-5:] == ["-", "-", "-", "-", "-"], line  # no end, lag unknown
    finally:
        follower.stop()


def test_cluster_status_of_a_topic_a_broker_lacks_says_so_not_that_it_did_not_answer(
        tmp_path: Path) -> None:
    """`--topic T` where a broker answers that it has no T: named as such (it answered,
    its ZooKeeper state stays in --json), exit 1 only when no broker has T; a name
    the broker would refuse is bad usage (exit 2, one line) before any connection."""
    first, second = broker(tmp_path, "first", ""), broker(tmp_path, "second", "")
    try:
        first.start()
        second.start()
        create_topic(stub(first.address), "only")
        command = [sys.executable, "-m", "keybus", "cluster", "status", "--broker",
                   f"{first.address},{second.address}", "--timeout", "20"]

        def status(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60)

        done = status("--topic", "only", "--json")
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip() == f"keybus: {second.address} holds no topic 'only'"
        answered = json.loads(done.stdout)
        assert all("error" not in b for b in answered["brokers"]), answered["brokers"]
        assert [b["address"] for b in answered["topics"][0]["brokers"]] == [first.address]
        done = status("--topic", "nosuch")
        assert done.returncode == 1 and done.stderr.strip() == (
            "keybus: error: topic 'nosuch' is on none of the brokers that answered "
            f"({first.address}, {second.address}); keybus topics list --broker ADDRESS shows "
            "what one holds"), done.stderr
        assert "unreachable" not in done.stdout, done.stdout
        done = status("--topic", "bad topic")
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert "'bad topic' is not a name" in done.stderr and not done.stdout, done
    finally:
        second.stop()
        first.stop()
