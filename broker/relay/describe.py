"""`DescribeCluster`'s answer: this broker's view of every replicated topic.

Runs on the event loop; reads only in-memory state (roles, copy states,
followers' reports and how many follow, partition offsets).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from broker.errors import BrokerError
from broker.relay.copy_state import wall_ms
from sdk.core.pb import keybus_pb2 as pb

if TYPE_CHECKING:
    from broker.relay.node import RelayNode
    from broker.relay.topic_role import TopicRole


def cluster_info(node: RelayNode, topics: list[str], session_state: str) -> pb.ClusterInfo:
    relay = node.relay
    info = pb.ClusterInfo(broker_id=relay.broker_id, address=relay.address,
                          zookeeper=relay.zookeeper, zookeeper_state=session_state)
    for topic in topics:
        role = node.roles.get(topic)
        try:
            partitions = node.registry.partitions(topic)
        except BrokerError:
            if role is None:
                raise
            partitions = []
        info.topics.append(topic_info(topic, role, partitions, relay.address,
                                      relay.upstream_silence_ms))
    return info


def topic_info(topic: str, role: TopicRole | None, partitions: list, address: str,  # type: ignore[type-arg]
               silence_ms: int) -> pb.TopicRoleInfo:
    """One topic's role and copies; silence_ms: how long an upstream may be silent
    before its lag counts as unknown (RelaySettings.upstream_silence_ms)."""
    now = wall_ms()
    if role is None:
        result = pb.TopicRoleInfo(topic=topic, role="standalone", writable=True, leader=address,
                                  election="none")
    else:
        writable = role.role == "leader" and role.confirmed and not role.stopping
        result = pb.TopicRoleInfo(
            topic=topic, role=role.role, writable=writable, leader=role.leader,
            leader_epoch=role.epoch, election=role.replication.election,
            upstream=role.follower.upstream if role.follower else "",
            acks=role.replication.acks, leader_changes=role.leader_changes,
            detail="" if writable else _detail(role))
    follower = role.follower if role is not None else None
    copies = follower.states if follower is not None else {}
    # the copy's setup fails (no partition copies yet): each partition's upstream is away
    setup_lost_ms = follower.unreachable_since_ms if follower is not None else 0
    counted = role is not None and role.role == "leader" and role.replication.acks > 0
    trackers = role.trackers if role is not None and counted else {}
    now_monotonic_ms = time.monotonic() * 1000  # the trackers' clock
    for partition in partitions:
        state = copies.get(partition.index)
        entry = pb.PartitionRelayInfo(partition=partition.index, end_offset=partition.end_offset,
                                      log_end_offset=partition.log_end, upstream_read_ms_ago=-1)
        if state is not None:
            entry.upstream_end_offset = state.upstream_end
            entry.lag_events = max(state.upstream_end - partition.log_end, 0)
            entry.lag_ms = 0 if not entry.lag_events or not state.caught_up_ms else \
                now - state.caught_up_ms
            entry.upstream_read_ms_ago = now - state.last_read_ms if state.last_read_ms else -1
        lost_ms = state.unheard_since_ms(now, silence_ms) if state is not None else setup_lost_ms
        if lost_ms:  # the lag above is as last heard: unknown now (CopyState)
            entry.upstream_unreachable_ms = max(now - lost_ms, 0)
        tracker = trackers.get(partition.index)
        if tracker is not None:  # what refuses produce (acks.py rule 5), seen before it does
            entry.followers_following = tracker.following(now_monotonic_ms)  # grace included
        result.partitions.append(entry)
    if role is not None and role.role == "leader":
        ends = {p.index: p.log_end for p in partitions}
        for (broker, index), (follower_address, end, reported_ms) in sorted(role.reports.items()):
            tracker = trackers.get(index)
            # following now, in its grace or stopped (with any acks: the trackers
            # follow the report streams with acks = leader too)
            any_tracker = role.trackers.get(index)
            follows, follows_ms = any_tracker.state(broker, now_monotonic_ms) if any_tracker \
                else ("", 0)
            result.followers.append(pb.ReplicaInfo(
                broker_id=broker, address=follower_address, partition=index, end_offset=end,
                lag_events=max(ends.get(index, end) - end, 0),
                last_report_ms_ago=now - reported_ms,
                grace_left_ms=tracker.grace_left_ms(broker, now_monotonic_ms) if tracker else 0,
                state=follows, stopped_ms_ago=follows_ms if follows == "stopped" else 0))
    return result


def _detail(role: TopicRole) -> str:
    if role.role == "leader" and role.stopping:
        return "the leader is stopping"
    if role.role == "leader":
        return "leadership unconfirmed: ZooKeeper unreachable"
    if role.role == "follower":
        failure = role.follower.failure() if role.follower is not None else ""
        return f"a follower; the leader is {role.leader}" + (f"; {failure}" if failure else "")
    return role.detail
