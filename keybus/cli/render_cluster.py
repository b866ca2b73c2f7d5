"""Pure rendering of `keybus cluster status`: one row per topic and broker.

The table follows the CLI's rule (render.fit_table): it fits the terminal
or becomes one block per row, never cutting a topic or broker; what does
not fit a column (a broker's detail, why one did not answer) goes on notes
under the table.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from keybus.cli.render import fit_table
from sdk.core.pb import keybus_pb2 as pb


class Refused(str):
    """Why a broker gave no cluster state when it answered, but no (a permission it
    lacks, a bad request): the role column says "refused", not "unreachable"."""


Answer = tuple[str, pb.ClusterInfo | str]  # (address asked, its answer or why none)
HEADERS = ("topic", "broker", "role", "zookeeper", "epoch", "following", "end offsets", "lag",
           "lag s", "read s ago")


def cluster_dict(answers: list[Answer]) -> dict[str, Any]:
    """Per topic: the leader and every broker's role, lag and ZooKeeper state (for --json)."""
    topics: dict[str, dict[str, Any]] = {}
    brokers = []
    for address, info in answers:
        if isinstance(info, str):
            brokers.append({"address": address, "error": str(info),
                            "refused": isinstance(info, Refused)})
            continue
        brokers.append({"address": address, "broker_id": info.broker_id,
                        "zookeeper": info.zookeeper, "zookeeper_state": info.zookeeper_state})
        for topic in info.topics:
            entry = topics.setdefault(topic.topic, {"topic": topic.topic, "leader": "",
                                                    "leader_epoch": 0, "brokers": []})
            if topic.writable and topic.leader_epoch >= entry["leader_epoch"]:
                entry["leader"], entry["leader_epoch"] = info.address, topic.leader_epoch
            entry["brokers"].append(_broker_row(info, topic))
    return {"brokers": brokers, "topics": [topics[name] for name in sorted(topics)]}


def _broker_row(info: pb.ClusterInfo, topic: pb.TopicRoleInfo) -> dict[str, Any]:
    # A follower's lag is measured against the upstream end it last heard: before its
    # first read it knows none, and 0 would say "caught up" of a copy that never ran.
    # While its upstream is unreachable that end is stale: unknown too.
    unknown = topic.role == "follower"
    return {
        "address": info.address, "role": topic.role, "writable": topic.writable,
        "leader": topic.leader, "leader_epoch": topic.leader_epoch, "election": topic.election,
        "acks": topic.acks, "upstream": topic.upstream, "detail": topic.detail,
        "leader_changes": topic.leader_changes, "zookeeper_state": info.zookeeper_state,
        "partitions": [_partition_row(p, unknown and (p.upstream_read_ms_ago < 0
                                                      or p.HasField("upstream_unreachable_ms")))
                       for p in topic.partitions],
        "followers": [{"broker_id": f.broker_id, "address": f.address, "partition": f.partition,
                       "end_offset": f.end_offset, "lag_events": f.lag_events,
                       "last_report_s_ago": f.last_report_ms_ago / 1000,
                       # how much longer it counts as following by its grace alone (its
                       # report stream closed; relay_follower_grace_ms), 0 while connected
                       "grace_left_s": f.grace_left_ms / 1000,
                       # following, in_grace or stopped; None from an older broker
                       "state": f.state or None,
                       "stopped_s_ago": f.stopped_ms_ago / 1000 if f.state == "stopped"
                       else None} for f in topic.followers],
    }


def _partition_row(p: pb.PartitionRelayInfo, lag_unknown: bool) -> dict[str, Any]:
    """One partition; lag_events and lag_s are None while the lag is unknown;
    followers_following is None but on a leader with acks = n; upstream_unreachable_s
    is None but on a follower whose copy cannot reach its upstream (for how long)."""
    return {"partition": p.partition, "end_offset": p.end_offset,
            "followers_following": p.followers_following
            if p.HasField("followers_following") else None,
            "lag_events": None if lag_unknown else p.lag_events,
            "lag_s": None if lag_unknown else p.lag_ms / 1000,
            "upstream_read_s_ago": p.upstream_read_ms_ago / 1000
            if p.upstream_read_ms_ago >= 0 else None,
            "upstream_unreachable_s": p.upstream_unreachable_ms / 1000
            if p.HasField("upstream_unreachable_ms") else None}


def _sum_or_dash(values: list[int | None]) -> str:
    """The sum; "-" when one is unknown or there is none (a topic not created yet)."""
    return "-" if None in values or not values else str(sum(v for v in values if v is not None))


def _max_or_dash(values: list[float | None]) -> str:
    if None in values or not values:
        return "-"
    return f"{max((v for v in values if v is not None), default=0):.1f}"


def _following(row: dict[str, Any]) -> str:
    """`following/acks` of a leader with acks = n ("2/2"; fewer than acks refuse
    produce), one per partition when they differ ("2/2,1/2"); "-" elsewhere; with
    `_grace_note` when some follow by their grace alone."""
    counts = [p["followers_following"] for p in row["partitions"]]
    if not counts or None in counts:
        return "-"
    cells = [f"{count}/{row['acks']}" for count in counts]
    return (cells[0] if len(set(cells)) == 1 else ",".join(cells)) + _grace_note(row)


def _grace_note(row: dict[str, Any]) -> str:
    """" (1 in grace, 3.2 s left)": followers that count by their grace alone, and the
    soonest to stop counting; "" when none does."""
    in_grace = [f for f in row["followers"] if f["grace_left_s"]]
    if not in_grace:
        return ""
    count = len({f["broker_id"] for f in in_grace})
    return f" ({count} in grace, {min(f['grace_left_s'] for f in in_grace):.1f} s left)"


def _stopped_notes(topic: str, row: dict[str, Any]) -> list[str]:
    """One note per follower a leader lists that no longer follows (its report
    stream closed and its grace is over), naming its partitions and since when:
    without it the table shows it nowhere but in a lower following count."""
    stopped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for follower in row["followers"]:
        if follower["state"] == "stopped":
            stopped.setdefault((follower["broker_id"], follower["address"]), []).append(follower)
    notes = []
    for (broker_id, address), entries in sorted(stopped.items()):
        partitions = ",".join(str(f["partition"]) for f in entries)
        since = min(f["stopped_s_ago"] for f in entries)
        notes.append(f"{topic} on {row['address']}: follower {broker_id} ({address}) stopped "
                     f"following partition(s) {partitions} {since:.1f} s ago (its report "
                     "stream closed and relay_follower_grace_ms passed)")
    return notes


def _unreachable_note(topic: str, row: dict[str, Any]) -> list[str]:
    """One note when the follower cannot reach its upstream for some partitions,
    naming them and since when (the longest): its lag shows "-" there, and without
    the note "read s ago" alone would not say why."""
    lost = [(p["partition"], p["upstream_unreachable_s"]) for p in row["partitions"]
            if p["upstream_unreachable_s"] is not None]
    if not lost:
        return []
    partitions = ",".join(str(index) for index, _ in lost)
    since = max(seconds for _, seconds in lost)
    return [f"{topic} on {row['address']}: upstream {row['upstream'] or '?'} unreachable "
            f"since {since:.1f} s ago for partition(s) {partitions}; lag unknown"]


def cluster_rows(status: dict[str, Any]) -> tuple[list[tuple[str, ...]], list[str]]:
    """(table rows: leader first per topic, then followers, then unreachable brokers;
    notes: each broker's detail and why a broker did not answer)."""
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    for topic in status["topics"]:
        for row in sorted(topic["brokers"], key=lambda b: (not b["writable"], b["address"])):
            parts = row["partitions"]
            read_ago = [p["upstream_read_s_ago"] for p in parts
                        if p["upstream_read_s_ago"] is not None]
            role = row["role"] + ("" if row["writable"] or row["role"] != "leader" else " (!)")
            rows.append((topic["topic"], row["address"], role, row["zookeeper_state"] or "-",
                         str(row["leader_epoch"]), _following(row),
                         ",".join(str(p["end_offset"]) for p in parts) or "-",
                         _sum_or_dash([p["lag_events"] for p in parts]),
                         _max_or_dash([p["lag_s"] for p in parts]),
                         f"{max(read_ago):.1f}" if read_ago else "-"))
            if row["detail"]:
                notes.append(f"{topic['topic']} on {row['address']}: {row['detail']}")
            notes.extend(_unreachable_note(topic["topic"], row))
            notes.extend(_stopped_notes(topic["topic"], row))
    for broker in status["brokers"]:
        if "error" in broker:
            role = "refused" if broker["refused"] else "unreachable"
            rows.append(("-", broker["address"], role, *["-"] * 7))
            notes.append(f"{broker['address']}: {broker['error']}")
    return rows, notes


def cluster_table(answers: list[Answer], width: int, wide: bool = False) -> RenderableType:
    """The human view for `width` columns: the table, then the notes."""
    rows, notes = cluster_rows(cluster_dict(answers))
    table = fit_table("keybus cluster", HEADERS, rows, width, wide, numeric_from=4)
    return Group(table, *(Text(note) for note in notes))
