"""`keybus cluster status` shows a follower counted by its grace alone (render_cluster.py).

Method: DescribeCluster answers built by hand, rendered as JSON and as the table.
"""

from __future__ import annotations

from rich.console import Console

from keybus.cli.render_cluster import cluster_dict, cluster_table
from sdk.core.pb import keybus_pb2 as pb


def answer(*grace_left_ms: int) -> list[tuple[str, pb.ClusterInfo | str]]:
    topic = pb.TopicRoleInfo(topic="t", role="leader", writable=True, leader="a:1", acks=2,
                             partitions=[pb.PartitionRelayInfo(partition=0,
                                                               followers_following=2)])
    for i, left in enumerate(grace_left_ms):
        topic.followers.append(pb.ReplicaInfo(broker_id=f"b{i}", partition=0,
                                              grace_left_ms=left))
    return [("a:1", pb.ClusterInfo(address="a:1", topics=[topic]))]


def table(answers: list[tuple[str, pb.ClusterInfo | str]]) -> str:
    console = Console(width=200, record=True)
    console.print(cluster_table(answers, 200, False))
    return console.export_text()


def test_json_has_each_followers_grace_left() -> None:
    [row] = cluster_dict(answer(0, 3_200))["topics"][0]["brokers"]
    assert [f["grace_left_s"] for f in row["followers"]] == [0, 3.2]


def test_the_following_cell_names_the_followers_in_grace_and_the_least_left() -> None:
    assert "2/2 (2 in grace, 1.5 s left)" in table(answer(3_200, 1_500))
    assert "2/2 (1 in grace, 3.2 s left)" in table(answer(0, 3_200))
    text = table(answer(0, 0))
    assert "2/2" in text and "in grace" not in text


def with_states(*states: tuple[str, int]) -> list[tuple[str, pb.ClusterInfo | str]]:
    """A leader listing one follower per (state, stopped_ms_ago), on partitions 0 and 1."""
    topic = pb.TopicRoleInfo(topic="t", role="leader", writable=True, leader="a:1", acks=1,
                             partitions=[pb.PartitionRelayInfo(partition=0,
                                                               followers_following=1)])
    for i, (state, stopped_ms) in enumerate(states):
        for partition in (0, 1):
            topic.followers.append(pb.ReplicaInfo(
                broker_id=f"b{i}", address=f"b:{i}", partition=partition, state=state,
                stopped_ms_ago=stopped_ms + partition * 1_000))
    return [("a:1", pb.ClusterInfo(address="a:1", topics=[topic]))]


def test_json_and_table_tell_a_stopped_follower_from_a_connected_one() -> None:
    answers = with_states(("following", 0), ("stopped", 41_200))
    [row] = cluster_dict(answers)["topics"][0]["brokers"]
    assert [(f["broker_id"], f["state"], f["stopped_s_ago"]) for f in row["followers"]] == [
        ("b0", "following", None), ("b0", "following", None),
        ("b1", "stopped", 41.2), ("b1", "stopped", 42.2)]
    text = table(answers)
    assert "t on a:1: follower b1 (b:1) stopped following partition(s) 0,1 41.2 s ago" in text
    assert "b0" not in text


def test_an_older_broker_without_state_renders_as_before() -> None:
    [row] = cluster_dict(answer(0))["topics"][0]["brokers"]
    assert row["followers"][0]["state"] is None and "stopped" not in table(answer(0))
