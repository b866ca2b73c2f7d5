"""High watermark and truncation, with a real ZooKeeper and real broker processes.

Goal: on a topic with `acks = 2`, no reader, consumer or compacted view of
any broker sees an event before two followers hold it (so no failover can
take back an event someone saw); `acks = n` with a follower connected but
not copying answers a produce with a clear `acks_timeout` after
`acks_timeout_ms`, and the event becomes visible once copied; with fewer
than n followers connected it refuses a produce at once and stores nothing;
a broker that truncates its
unacknowledged tail ends read streams past the cut with `log_truncated` and
keeps no dropped event in its compacted view.

Method: three `python -m broker` processes (`keybus.dev_cluster`) with a 2 s
ZooKeeper session; followers are paused with SIGSTOP or killed with SIGKILL;
streams are raw gRPC calls or SDK clients on one broker. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from keybus.dev_cluster import BrokerRunner, start_cluster
from sdk import Consumer, Reader
from sdk.core.columns import keys_of
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb
from tests.support.relay_cluster import (
    cluster_story,
    records,
    role,
    wait_for,
    wait_settled,
    writable,
)
from tests.support.wire import stub
from tests.support.zookeeper import ZooKeeperServer, zookeeper_running

SESSION_MS = 2_000
ACKS_TIMEOUT_MS = 3_000
FOLLOWER_GRACE_MS = 500  # a killed follower counts this long (relay_follower_grace_ms)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with zookeeper_running(tmp_path_factory.mktemp("zookeeper") / "zk") as server:
        yield server


def cluster(root: Path, zookeeper: str, name: str) -> list[BrokerRunner]:
    return start_cluster(root, 3, zookeeper, 2, session_timeout_ms=SESSION_MS, extra={
        "zookeeper_root": f"/keybus-test/{name}", "relay_retry_backoff_max_ms": 500,
        "relay_sync_interval_ms": 200, "acks_timeout_ms": ACKS_TIMEOUT_MS,
        "relay_follower_grace_ms": FOLLOWER_GRACE_MS})


def pause(broker: BrokerRunner, paused: bool) -> None:
    os.kill(broker.pid, signal.SIGSTOP if paused else signal.SIGCONT)


def ends(broker: BrokerRunner) -> tuple[int, int]:
    """(readable end, durable log end) of t/0 as the broker describes it."""
    info = role(broker.address, "t")
    assert info is not None
    return info.partitions[0].end_offset, info.partitions[0].log_end_offset


def produce(address: str, keys: list[int], value: bytes, window: bool = False) -> str:
    """One raw produce; 'acknowledged' or the error's text (with its code's name)."""
    batch = pb.EventBatch(count=len(keys), key_ints=keys, slots=slots_of(keys),
                          values=[value] * len(keys))
    try:
        for answer in stub(address).Produce(iter([pb.ProduceRequest(
                topic="t", batch=batch, window=window, request_id=1)]), timeout=30):
            if not answer.error_code:
                return "acknowledged"
            code = next(c.name for c in grpc.StatusCode if c.value[0] == answer.error_code)
            return f"{code}: {answer.error_message}"
    except grpc.RpcError as e:
        return f"{e.code().name}: {e.details()}"
    return "no answer"


def create_viewed_topic(address: str) -> None:
    stub(address).CreateTopic(pb.CreateTopicRequest(
        topic="t", config=pb.TopicConfig(partitions=1, view=pb.VIEW_ON)), timeout=10)


# ---------------------------------------------------------------- acks = 2, a follower paused

class Watchers:
    """A Reader and a Consumer on one broker, recording (key, value) as they come."""

    def __init__(self, address: str, start: int) -> None:
        self.address, self.start = address, start
        self.read: list[tuple[int, bytes]] = []
        self.received: list[tuple[int, bytes]] = []
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        try:
            async with await Consumer.subscribe(self.address, "t", "hw", type="shared",
                                                start="latest") as consumer:
                reading = asyncio.create_task(self._read())
                self.ready.set()
                while not self.stop.is_set():
                    try:
                        message = await consumer.receive(timeout_s=0.2)
                    except TimeoutError:
                        continue
                    self.received.append((int(message.key), message.value))
                    consumer.ack(message)
                reading.cancel()
        except Exception as e:  # reported by the test
            self.errors.append(repr(e))
            self.ready.set()

    async def _read(self) -> None:
        async with Reader(self.address, "t", 0, start=self.start, follow=True) as reader:
            async for batch in reader:
                keys = list(map(int, batch.keys()))
                self.read.extend(zip(keys, batch.values, strict=True))


def test_acks_2_hides_an_event_until_two_followers_hold_it(zookeeper: ZooKeeperServer,
                                                           tmp_path: Path) -> None:
    brokers = cluster(tmp_path, zookeeper.address, "hidden")
    paused: BrokerRunner | None = None
    try:
        create_viewed_topic(brokers[0].address)
        leader_index = wait_settled(brokers, "t", followers=2)
        leader = brokers[leader_index]
        assert produce(leader.address, [1, 2, 3], b"acked") == "acknowledged"
        wait_settled(brokers, "t", followers=2)
        end = ends(leader)[0]
        watchers = Watchers(leader.address, end)
        thread = threading.Thread(target=watchers.run)
        thread.start()
        assert watchers.ready.wait(30) and not watchers.errors, watchers.errors
        paused, live = [b for i, b in enumerate(brokers) if i != leader_index]
        pause(paused, True)
        answer = produce(leader.address, [7], b"hidden")
        # acks = n with fewer than n followers able to copy: a clear error after the timeout.
        assert "1 of the 2 follower copies" in answer and "acks_timeout_ms" in answer, answer
        assert ends(leader) == (end, end + 1)  # stored, durable, not readable
        wait_for(lambda: ends(live) == (end, end + 1), 10, "the live follower holds it")
        info = stub(leader.address).DescribeTopic(pb.DescribeTopicRequest(topic="t"), timeout=5)
        assert info.partitions[0].end_offset == end and info.partitions[0].view_offset <= end
        assert watchers.read == [] and watchers.received == [], (watchers.read, watchers.received)
        assert [r.batch.values for r in records(leader.address, "t")][-1] == [b"acked"] * 3
        pause(paused, False)
        paused = None
        took = wait_for(lambda: watchers.read == [(7, b"hidden")]
                        and watchers.received == [(7, b"hidden")], 30,
                        "reader and consumer get the event once copied")
        print(f"acks=2, one follower paused: hidden until copied; delivered {took:.2f} s "
              "after the follower resumed")
        wait_for(lambda: all(ends(b) == (end + 1, end + 1) for b in brokers), 10,
                 "every broker shows it")
        watchers.stop.set()
        thread.join(30)
        assert not watchers.errors, watchers.errors
    finally:
        if paused is not None:
            pause(paused, False)
        for b in brokers:
            b.kill()


# ---------------------------------------------------------------- acks = 2, a follower gone

def test_acks_2_with_one_follower_refuses_at_once_and_stores_nothing(zookeeper: ZooKeeperServer,
                                                                     tmp_path: Path) -> None:
    brokers = cluster(tmp_path, zookeeper.address, "refused")
    try:
        create_viewed_topic(brokers[0].address)
        leader_index = wait_settled(brokers, "t", followers=2)
        leader = brokers[leader_index]
        assert produce(leader.address, [1], b"acked") == "acknowledged"
        gone = next(b for i, b in enumerate(brokers) if i != leader_index)
        gone.kill()  # its report stream to the leader closes with its process
        time.sleep(0.5 + FOLLOWER_GRACE_MS / 1000)  # the leader sees the connection reset
        # well within 0.5 s, and counts the follower no more once its grace is over
        before = ends(leader)
        began = time.monotonic()
        answer = produce(leader.address, [7], b"refused")
        took = time.monotonic() - began
        print(f"acks=2, one follower: refused after {took * 1000:.0f} ms: {answer}")
        assert answer.startswith("UNAVAILABLE: topic 't' has acks=2, so 2 follower(s) must copy "
                                 f"each event from its leader {leader.address}, but 1 follow it "
                                 "now; nothing of this produce to partition 0 was stored"), answer
        assert took < ACKS_TIMEOUT_MS / 1000 / 3, took  # at once, not after acks_timeout_ms
        assert ends(leader) == before  # nothing stored
        gone.start()
        wait_settled(brokers, "t", followers=2)
        assert produce(leader.address, [8], b"acked") == "acknowledged"
        assert [r.batch.values for r in records(leader.address, "t")] == [[b"acked"]] * 2
    finally:
        for b in brokers:
            b.kill()


# ---------------------------------------------------------------- truncation on rejoining

def read_stream(address: str, start: int, out: list[Any]) -> None:
    """A raw follow Read on one broker: its first event's (offset, value), or its error."""
    request = pb.ReadRequest(topic="t", partition=0, start=pb.StartPosition(offset=start),
                             follow=True)
    try:
        for response in stub(address).Read(request, timeout=90):
            for record in response.records:
                out.extend((record.base_offset + i, v) for i, v in enumerate(record.batch.values))
            if out:
                return
    except grpc.RpcError as e:
        out.append((e.code(), e.details()))


def snapshot(address: str) -> dict[int, bytes]:
    """The compacted view as Bootstrap's snapshot: key -> value."""
    request = pb.BootstrapRequest(topic="t", partition=0)
    found: dict[int, bytes] = {}
    for response in stub(address).Bootstrap(request, timeout=30):
        for record in response.records:
            found.update(zip((int(k) for k in keys_of(record.batch)), record.batch.values,
                             strict=True))
    return found


def test_truncation_ends_streams_past_the_cut_and_keeps_the_view_clean(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    brokers = cluster(tmp_path, zookeeper.address, "truncate")
    old_paused = False
    try:
        create_viewed_topic(brokers[0].address)
        old = wait_settled(brokers, "t", followers=2)
        keys = list(range(10))
        assert produce(brokers[old].address, keys, b"acked") == "acknowledged"
        wait_settled(brokers, "t", followers=2)
        end = ends(brokers[old])[0]
        wait_for(lambda: snapshot(brokers[old].address) == dict.fromkeys(keys, b"acked"), 10,
                 "the view holds the acknowledged events")
        followers = [b for i, b in enumerate(brokers) if i != old]
        for follower in followers:  # paused, they still follow: the leader stores what
            pause(follower, True)   # comes next and waits for copies
        answer = produce(brokers[old].address, keys, b"tail", window=True)
        assert "acks_timeout_ms" in answer, answer
        for follower in followers:  # killed still paused: nobody copied the tail (killed
            follower.kill()         # before it, the leader would refuse it, storing nothing)
        assert ends(brokers[old]) == (end, end + 10)
        past: list[Any] = []  # a stream opened past the cut
        at: list[Any] = []  # and one at it
        streams = [threading.Thread(target=read_stream, args=(brokers[old].address, start, out))
                   for start, out in ((end + 5, past), (end, at))]
        for thread in streams:
            thread.start()
        pause(brokers[old], True)  # its ZooKeeper session expires: it no longer leads
        old_paused = True
        for follower in followers:
            follower.start()
        wait_for(lambda: [i for i in writable(brokers, "t") if i != old], 30, "a new leader")
        new = next(i for i in writable(brokers, "t") if i != old)
        # One follower for acks = 2: refused at once, or (while the new leader still waits
        # for its followers to attach, acks_timeout_ms) stored and not acknowledged in time.
        answer = produce(brokers[new].address, [100], b"new", window=True)
        assert answer != "acknowledged", cluster_story(brokers, "t")
        pause(brokers[old], False)  # comes back, truncates, follows; now acks flow again
        old_paused = False
        wait_settled(brokers, "t", followers=2, timeout_s=60)
        assert produce(brokers[new].address, [100], b"new", window=True) == "acknowledged"
        for thread in streams:
            thread.join(60)
        assert f"dropped offsets {end}..{end + 9}" in brokers[old].log_path.read_text()
        assert len(past) == 1 and past[0][0] == grpc.StatusCode.OUT_OF_RANGE, past
        assert f"truncated to offset {end}" in past[0][1], past
        # The stream at the cut goes on with the new leader's event, never the dropped ones.
        assert at[:1] == [(end, b"new")], at
        view = snapshot(brokers[old].address)
        assert b"tail" not in view.values() and view.get(100) == b"new", view
    finally:
        if old_paused:
            pause(brokers[old], False)
        for b in brokers:
            b.kill()
