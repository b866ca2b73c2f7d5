"""Helpers for relay tests: brokers' roles over the wire and waiting on them, bounded."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import grpc

from keybus.dev_cluster import BrokerRunner
from sdk.core.pb import keybus_pb2 as pb
from tests.support.wire import stub


def role(address: str, topic: str) -> pb.TopicRoleInfo | None:
    """The broker's view of `topic`; None when it does not answer or lacks the topic."""
    try:
        info = stub(address).DescribeCluster(pb.DescribeClusterRequest(topic=topic), timeout=2)
    except grpc.RpcError:
        return None
    return info.topics[0] if info.topics else None


def roles(brokers: Sequence[BrokerRunner], topic: str) -> list[pb.TopicRoleInfo | None]:
    return [role(b.address, topic) if b.running() else None for b in brokers]


def wait_for(condition: Callable[[], object], timeout_s: float, what: str,
             interval_s: float = 0.05) -> float:
    """Poll until condition() is truthy; returns the seconds it took. Raises AssertionError."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(interval_s)
    return time.monotonic() - began


def writable(brokers: Sequence[BrokerRunner], topic: str) -> list[int]:
    """Indexes of the brokers that take produce for `topic` now."""
    return [i for i, r in enumerate(roles(brokers, topic)) if r is not None and r.writable]


def settled(brokers: Sequence[BrokerRunner], topic: str, followers: int) -> int | None:
    """The leader's index once one leads and `followers` others copy from it at its end
    (log end and high watermark: readers see the same on every broker)."""
    found = roles(brokers, topic)
    leaders = [i for i, r in enumerate(found) if r is not None and r.writable]
    if len(leaders) != 1:
        return None
    leader = found[leaders[0]]
    assert leader is not None
    ends = [(p.end_offset, p.log_end_offset) for p in leader.partitions]
    copying = [r for r in found if r is not None and r.role == "follower"
               and r.leader_epoch == leader.leader_epoch
               and [(p.end_offset, p.log_end_offset) for p in r.partitions] == ends]
    return leaders[0] if len(copying) >= followers else None


def caught_up(brokers: Sequence[BrokerRunner], topic: str, followers: int) -> Callable[[], bool]:
    """A condition for a cluster under load: one leader, and `followers` others in its epoch
    holding at least what the leader held when it was first seen leading. Under load the
    ends never match at one instant (the roles are asked one by one), so `settled` may
    never hold; this asks only that followers reach a position the leader once had."""
    seen: tuple[str, int] | None = None  # the leader noted, and its epoch
    ends: list[tuple[int, int]] = []  # its partitions' ends when noted

    def reached() -> bool:
        nonlocal seen, ends
        found = roles(brokers, topic)
        leaders = [r for r in found if r is not None and r.writable]
        if len(leaders) != 1:
            return False
        leader = leaders[0]
        if seen != (leader.leader, leader.leader_epoch):
            seen = (leader.leader, leader.leader_epoch)
            ends = [(p.end_offset, p.log_end_offset) for p in leader.partitions]
            return False
        copying = [r for r in found if r is not None and r.role == "follower"
                   and r.leader_epoch == leader.leader_epoch and len(r.partitions) == len(ends)
                   and all(p.end_offset >= end and p.log_end_offset >= log_end
                           for p, (end, log_end) in zip(r.partitions, ends, strict=True))]
        return len(copying) >= followers
    return reached


def wait_settled(brokers: Sequence[BrokerRunner], topic: str, followers: int,
                 timeout_s: float = 30.0) -> int:
    found: list[int] = []

    def done() -> bool:
        index = settled(brokers, topic, followers)
        if index is not None:
            found.append(index)
        return index is not None
    wait_for(done, timeout_s, f"one leader of {topic} and {followers} caught-up followers")
    return found[-1]


def records(address: str, topic: str, partition: int = 0) -> list[pb.Record]:
    request = pb.ReadRequest(topic=topic, partition=partition, start=pb.StartPosition(earliest=True))
    return [r for response in stub(address).Read(request, timeout=30) for r in response.records]


def events(address: str, topic: str, partition: int = 0) -> int:
    """How many events the broker holds (-1 while it lacks the topic or does not answer)."""
    try:
        return sum(r.batch.count for r in records(address, topic, partition))
    except grpc.RpcError:
        return -1


def cluster_story(brokers: Sequence[BrokerRunner], topic: str, log_lines: int = 40) -> str:
    """What each broker says of `topic` and the end of its log: a failed assertion's
    message, since pytest keeps only its last few temp dirs."""
    parts = []
    for index, (broker, info) in enumerate(zip(brokers, roles(brokers, topic), strict=True)):
        parts.append(f"--- broker {index} {broker.address}: {info}")
        if broker.log_path.exists():
            lines = broker.log_path.read_text(errors="replace").splitlines()[-log_lines:]
            parts.extend(lines)
    return "\n".join(parts)
