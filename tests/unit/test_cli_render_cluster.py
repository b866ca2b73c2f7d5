"""`keybus cluster status` rendering: the leader named per topic, followers with their lag,
and how many followers follow a leader with acks = n (fewer than acks refuse produce).

Method: two brokers' DescribeCluster answers and one unreachable broker,
rendered as JSON and as the table (pure functions, no network).
"""

from __future__ import annotations

from rich.console import Console

from keybus.cli.render_cluster import (
    HEADERS,
    Refused,
    cluster_dict,
    cluster_rows,
    cluster_table,
)
from sdk.core.pb import keybus_pb2 as pb


def answers() -> list[tuple[str, pb.ClusterInfo | str]]:
    leader = pb.ClusterInfo(broker_id="a:1", address="a:1", zookeeper="z:2181",
                            zookeeper_state="CONNECTED")
    leader.topics.add(topic="t", role="leader", writable=True, leader="a:1", leader_epoch=3,
                      election="zookeeper", acks=1,
                      partitions=[pb.PartitionRelayInfo(end_offset=100, upstream_read_ms_ago=-1)],
                      followers=[pb.ReplicaInfo(broker_id="b:1", end_offset=90, lag_events=10,
                                                last_report_ms_ago=20)])
    follower = pb.ClusterInfo(broker_id="b:1", address="b:1", zookeeper_state="CONNECTED")
    follower.topics.add(topic="t", role="follower", leader="a:1", leader_epoch=3, upstream="a:1",
                        partitions=[pb.PartitionRelayInfo(end_offset=90, upstream_end_offset=100,
                                                          lag_events=10, lag_ms=1500,
                                                          upstream_read_ms_ago=250)])
    return [("a:1", leader), ("b:1", follower), ("c:1", "broker unavailable")]


def test_json_names_the_leader_and_each_brokers_lag() -> None:
    status = cluster_dict(answers())
    (topic,) = status["topics"]
    assert (topic["leader"], topic["leader_epoch"]) == ("a:1", 3)
    follower = next(b for b in topic["brokers"] if b["role"] == "follower")
    assert follower["partitions"][0] == {"partition": 0, "end_offset": 90, "lag_events": 10,
                                         "lag_s": 1.5, "upstream_read_s_ago": 0.25,
                                         "followers_following": None,
                                         "upstream_unreachable_s": None}
    assert status["brokers"][2] == {"address": "c:1", "error": "broker unavailable",
                                    "refused": False}


def rendered(width: int, wide: bool = False) -> list[str]:
    console = Console(width=width, record=True)
    console.print(cluster_table(answers(), width, wide))
    return [line for line in console.export_text().splitlines() if line.strip()]


def test_table_lists_leader_first_then_followers_and_the_unreachable() -> None:
    lines = rendered(200)
    rows = [line for line in lines if " a:1 " in line or " b:1 " in line or " c:1 " in line]
    assert "leader" in rows[0] and "follower" in rows[1] and "unreachable" in rows[2]
    assert "10" in rows[1] and "1.5" in rows[1] and "0.2" in rows[1]
    assert "c:1: broker unavailable" in lines  # why it did not answer, on a note


def test_table_fits_80_columns_and_never_cuts_a_name() -> None:
    many = answers()
    long_name = "payments-settlements-europe-west"
    for _, info in many[:2]:
        assert not isinstance(info, str)
        info.topics.add().CopyFrom(info.topics[0])
        info.topics[-1].topic = long_name
    console = Console(width=80, record=True)
    console.print(cluster_table(many, 80))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert "…" not in "".join(lines)
    assert any(long_name in line for line in lines) and any("b:1" in line for line in lines)
    text = "\n".join(lines)  # blocks break lines between `header value` pairs only
    assert "end offsets 90" in text and "lag s 1.5" in text and "read s ago 0.2" in text


def test_a_follower_that_never_read_its_upstream_has_no_lag_yet() -> None:
    never = pb.ClusterInfo(broker_id="d:1", address="d:1", zookeeper_state="CONNECTED")
    never.topics.add(topic="t", role="follower", leader="a:1", upstream="a:1",
                     detail="a follower; the leader is a:1; cannot set up the copy from a:1 (x)",
                     partitions=[pb.PartitionRelayInfo(end_offset=0, upstream_read_ms_ago=-1)])
    status = cluster_dict([*answers(), ("d:1", never)])
    row = next(b for b in status["topics"][0]["brokers"] if b["address"] == "d:1")
    assert row["partitions"][0]["lag_events"] is None and row["partitions"][0]["lag_s"] is None
    leader = next(b for b in status["topics"][0]["brokers"] if b["role"] == "leader")
    assert leader["partitions"][0]["lag_events"] == 0  # a leader copies nothing: no lag
    console = Console(width=200, record=True)
    console.print(cluster_table([*answers(), ("d:1", never)], 200))
    lines = console.export_text().splitlines()
    (line,) = [line for line in lines if " d:1 " in line]
    assert line.split()[-3:] == ["-", "-", "-"], line  # lag, lag s, read s ago
    assert "t on d:1: a follower; the leader is a:1; cannot set up the copy from a:1 (x)" in lines


def leading(acks: int, following: list[int | None]) -> pb.ClusterInfo:
    """A leader of 't' with `acks` whose partitions have these counts (None: absent)."""
    info = pb.ClusterInfo(broker_id="a:1", address="a:1", zookeeper_state="CONNECTED")
    topic = info.topics.add(topic="t", role="leader", writable=True, leader="a:1",
                            leader_epoch=3, election="zookeeper", acks=acks)
    for index, count in enumerate(following):
        topic.partitions.add(partition=index, end_offset=10, upstream_read_ms_ago=-1)
        if count is not None:
            topic.partitions[-1].followers_following = count
    return info


def following_cell(answers: list[tuple[str, pb.ClusterInfo | str]], address: str) -> str:
    rows, _ = cluster_rows(cluster_dict(answers))
    (row,) = [row for row in rows if row[1] == address]
    return row[HEADERS.index("following")]


def test_following_is_counted_over_the_acks_a_leader_needs() -> None:
    assert following_cell([("a:1", leading(2, [2]))], "a:1") == "2/2"
    assert following_cell([("a:1", leading(2, [1]))], "a:1") == "1/2"
    assert following_cell([("a:1", leading(2, [2, 2]))], "a:1") == "2/2"
    assert following_cell([("a:1", leading(2, [2, 1, 2]))], "a:1") == "2/2,1/2,2/2"
    status = cluster_dict([("a:1", leading(2, [0]))])
    assert status["topics"][0]["brokers"][0]["partitions"][0]["followers_following"] == 0
    assert following_cell([("a:1", leading(2, [0]))], "a:1") == "0/2"  # 0 is not "-"


def test_following_is_a_dash_where_nothing_is_counted() -> None:
    assert following_cell([("a:1", leading(0, [None]))], "a:1") == "-"  # acks = leader
    assert following_cell(answers(), "b:1") == "-"  # a follower
    assert following_cell(answers(), "c:1") == "-"  # unreachable


def test_table_shows_the_following_column() -> None:
    console = Console(width=200, record=True)
    console.print(cluster_table([("a:1", leading(2, [1])), *answers()[1:]], 200))
    lines = console.export_text().splitlines()
    assert "following" in next(line for line in lines if "epoch" in line)
    (row,) = [line for line in lines if " a:1 " in line]
    assert row.split()[5] == "1/2", row  # topic broker role zookeeper epoch following


def test_a_follower_whose_upstream_is_unreachable_shows_its_lag_unknown_and_since_when() -> None:
    """Its copy held all the upstream had when the upstream went away (lag 0 as last
    heard): while it cannot reach it, the lag is unknown ("-", null), not "caught up",
    and a note names the upstream, the partitions and since when."""
    lost = pb.ClusterInfo(broker_id="b:1", address="b:1", zookeeper_state="CONNECTED")
    lost.topics.add(topic="t", role="follower", leader="a:1", upstream="a:1", partitions=[
        pb.PartitionRelayInfo(partition=0, end_offset=90, upstream_end_offset=90,
                              upstream_read_ms_ago=12_400, upstream_unreachable_ms=12_300),
        pb.PartitionRelayInfo(partition=1, end_offset=7, upstream_end_offset=7,
                              upstream_read_ms_ago=300)])
    (row,) = cluster_dict([("b:1", lost)])["topics"][0]["brokers"]
    assert row["partitions"][0] | {"partition": 0} == {
        "partition": 0, "end_offset": 90, "lag_events": None, "lag_s": None,
        "upstream_read_s_ago": 12.4, "upstream_unreachable_s": 12.3, "followers_following": None}
    assert row["partitions"][1]["lag_events"] == 0  # that one still hears its upstream
    assert row["partitions"][1]["upstream_unreachable_s"] is None
    rows, notes = cluster_rows(cluster_dict([("b:1", lost)]))
    (cells,) = rows
    assert cells[HEADERS.index("lag")] == "-" and cells[HEADERS.index("lag s")] == "-", cells
    assert cells[HEADERS.index("read s ago")] == "12.4", cells
    assert ("t on b:1: upstream a:1 unreachable since 12.3 s ago for partition(s) 0; "
            "lag unknown") in notes, notes


def test_a_broker_that_answered_no_is_refused_not_unreachable() -> None:
    said = Refused("'bob' lacks the admin permission on every topic")
    status = cluster_dict([("d:1", said)])
    assert status["brokers"] == [{"address": "d:1", "error": str(said), "refused": True}]
    rows, notes = cluster_rows(status)
    assert rows == [("-", "d:1", "refused", *["-"] * 7)]
    assert notes == [f"d:1: {said}"]
