"""Metadata changes survive kill -9 of the broker: acknowledged ones all, others whole or not.

Goal: what an admin or a processor was told succeeded is there after a SIGKILL
and restart on the same data dir, and a change the kill cut is there whole or
not at all: topics created (many partitions) and deleted, access grants and
revokes, processor checkpoints, and seeks of every partition of a subscription
(written partition by partition, a kill once left a seek half done).
Method: a thread makes random changes with sync gRPC calls, recording each
one acknowledged and the one in flight; the test SIGKILLs the broker at a
random moment (seeded, printed on failure), restarts it, and compares what
the broker lists with the record. Bounded: KILLS kills, 127.0.0.1 only.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from sdk.core.pb import keybus_pb2 as pb
from tests.support.broker_process import BrokerProcess
from tests.support.wire import int_batch, stub

KILLS = 6
SEEKED, PARTS = "seeked", 8  # a topic with a subscription the thread seeks
GROUP = {"namespace": "ns", "topic": SEEKED, "consumer_group": "g"}


class Changes:
    """Makes random changes until the broker dies; keeps what was acknowledged."""

    def __init__(self, address: str, rng: random.Random, state: dict[str, Any]) -> None:
        self.client = stub(address)
        self.rng = rng
        self.state = state  # topics {name: partitions}, grants, checkpoints, cursors
        self.flight: tuple[Any, ...] = ()
        self.refused = ""  # a refusal other than the broker going away

    def run(self) -> None:
        for _ in range(10_000):
            try:
                self._one()
            except grpc.RpcError as e:
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                                    grpc.StatusCode.DEADLINE_EXCEEDED):
                    self.refused = f"{self.flight}: {e.code()} {e.details()}"
                return  # the broker died: expected
            self.flight = ()

    def _one(self) -> None:
        s, rng, c = self.state, self.rng, self.client
        choice = rng.randrange(5)
        if choice == 0 or (choice == 1 and not s["topics"]):
            s["created"] += 1
            name, parts = f"t{s['created']}", rng.choice([1, 16, 128])
            self.flight = ("create", name, parts)
            c.CreateTopic(pb.CreateTopicRequest(topic=name, config=pb.TopicConfig(
                partitions=parts)), timeout=10)
            s["topics"][name] = parts
        elif choice == 1:
            name = rng.choice(sorted(s["topics"]))
            self.flight = ("delete", name, s["topics"][name])
            c.DeleteTopic(pb.DeleteTopicRequest(topic=name), timeout=10)
            del s["topics"][name]
        elif choice == 2:
            grant = (f"p{rng.randrange(3)}", rng.choice([1, 2, 3]))
            entry = pb.AclEntry(principal=grant[0], topic="t*", permission=grant[1])  # type: ignore[arg-type]
            self.flight = ("grant", grant)
            if grant in s["grants"]:
                c.RevokePermissions(pb.RevokePermissionsRequest(entries=[entry]), timeout=10)
                s["grants"].discard(grant)
            else:
                c.GrantPermissions(pb.GrantPermissionsRequest(entries=[entry]), timeout=10)
                s["grants"].add(grant)
        elif choice == 3:
            partition, offset = rng.randrange(PARTS), rng.randrange(10)
            self.flight = ("checkpoint", partition, offset)
            c.UpdateCheckpoint(pb.UpdateCheckpointRequest(checkpoint=pb.CheckpointRecord(
                **GROUP, partition=partition, offset=offset)), timeout=10)
            s["checkpoints"][partition] = offset
        else:
            offset = rng.randrange(11)
            self.flight = ("seek", list(s["cursors"]), [offset] * PARTS)
            c.SeekSubscription(pb.SeekSubscriptionRequest(
                topic=SEEKED, subscription="s", position=pb.StartPosition(offset=offset)),
                timeout=10)
            s["cursors"] = [offset] * PARTS


def listed(address: str) -> dict[str, Any]:
    client = stub(address)
    topics = {t.topic: (t.config.partitions, len(t.partitions))
              for t in client.ListTopics(pb.ListTopicsRequest(), timeout=10).topics}
    grants = {(e.principal, e.permission)
              for e in client.ListPermissions(pb.ListPermissionsRequest(), timeout=10).entries}
    checkpoints = {c.partition: c.offset for c in client.ListCheckpoints(
        pb.ListCheckpointsRequest(**GROUP), timeout=10).checkpoints}
    cursors = [p.mark_delete for p in client.DescribeSubscription(
        pb.DescribeSubscriptionRequest(topic=SEEKED, subscription="s"), timeout=10).partitions]
    return {"topics": topics, "grants": grants, "checkpoints": checkpoints, "cursors": cursors}


def settle(state: dict[str, Any], flight: tuple[Any, ...], found: dict[str, Any],
           seed: int) -> None:
    """Check `found` against the acknowledged `state`; take the cut change in as found."""
    kind = flight[0] if flight else None
    topics = {n: (p, p) for n, p in state["topics"].items()}
    if kind in ("create", "delete"):
        name, parts = flight[1], flight[2]
        assert found["topics"].get(name) in (None, (parts, parts)), f"seed {seed}: {name} half"
        topics.pop(name, None)
        if name in found["topics"]:
            state["topics"][name] = parts
            topics[name] = (parts, parts)
        else:
            state["topics"].pop(name, None)
    assert {n: v for n, v in found["topics"].items() if n != SEEKED} == topics, f"seed {seed}"
    if kind == "grant":
        assert found["grants"] ^ state["grants"] <= {flight[1]}, f"seed {seed}: grants"
        state["grants"] = set(found["grants"])
    assert found["grants"] == state["grants"], f"seed {seed}: grants"
    if kind == "checkpoint" and found["checkpoints"].get(flight[1]) == flight[2]:
        state["checkpoints"][flight[1]] = flight[2]
    assert found["checkpoints"] == state["checkpoints"], f"seed {seed}: checkpoints"
    if kind == "seek":
        assert found["cursors"] in flight[1:], f"seed {seed}: seek half done {found['cursors']}"
        state["cursors"] = found["cursors"]
    assert found["cursors"] == state["cursors"], f"seed {seed}: cursors"


def test_sigkill_keeps_every_acknowledged_metadata_change(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        client = stub(broker.address)
        client.CreateTopic(pb.CreateTopicRequest(topic=SEEKED, config=pb.TopicConfig(
            partitions=PARTS)), timeout=10)
        for partition in range(PARTS):
            list(client.Produce(iter([pb.ProduceRequest(topic=SEEKED, partition=partition,
                                                        batch=int_batch(list(range(10))))]),
                                timeout=10))
        opened = client.Subscribe(iter([pb.SubscribeRequest(open=pb.SubscribeOpen(
            topic=SEEKED, subscription="s", consumer_name="c",
            initial_position=pb.StartPosition(earliest=True)))]), timeout=10)
        next(opened)
        opened.cancel()
        state: dict[str, Any] = {"topics": {}, "created": 0, "grants": set(),
                                 "checkpoints": {}, "cursors": [0] * PARTS}
        for _ in range(KILLS):
            changes = Changes(broker.address, rng, state)
            thread = threading.Thread(target=changes.run, daemon=True)
            thread.start()
            time.sleep(rng.uniform(0.05, 1.0))
            broker.kill()
            thread.join(30)
            assert not thread.is_alive(), f"seed {seed}: the changes hung after the kill"
            assert not changes.refused, f"seed {seed}: {changes.refused}"
            broker.start()
            settle(state, changes.flight, listed(broker.address), seed)
    finally:
        broker.stop()
