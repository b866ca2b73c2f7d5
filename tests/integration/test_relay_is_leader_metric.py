"""`keybus_relay_is_leader` says who leads a topic, also where no `[replication]` entry does.

Goal: a broker that leads topic t without a `[replication.t]` entry (it leads
every topic it has, as a single broker does), while a follower copies t from
it (the follower's entry names it as the static leader), exports
`keybus_relay_is_leader{topic="t"} 1`, and the follower 0. Before, only
brokers with an entry for the topic exported the gauge, so the leader's
series was absent: a dashboard could not tell "leads" from "metric missing".
Once t is deleted on the leader its series goes too (it leads no t any more).

Method: two real broker processes on 127.0.0.1 with config files; events
produced to the leader are waited for on the follower (it copies from this
leader); both brokers' metrics read over HTTP. Bounded waits only.
"""

from __future__ import annotations

import re
from pathlib import Path

from keybus.dev_cluster import free_port
from sdk.core.pb import keybus_pb2 as pb
from tests.support.metrics import metrics_text
from tests.support.relay_cluster import events, wait_for
from tests.support.relay_pair import broker, produce_records
from tests.support.wire import create_topic, stub


def is_leader(port: int) -> float | None:
    """The broker's `keybus_relay_is_leader` for t; None when it exports no series."""
    found = re.search(r'^keybus_relay_is_leader\{topic="t"\} (\S+)$', metrics_text(port),
                      re.MULTILINE)
    return float(found[1]) if found else None


def test_a_leader_without_replication_entry_exports_is_leader_and_its_follower_0(
        tmp_path: Path) -> None:
    leader_port, follower_port = free_port(), free_port()
    leader = broker(tmp_path, "leader", f"metrics_port = {leader_port}\n")
    follower = broker(tmp_path, "follower", (
        f"metrics_port = {follower_port}\nrelay_retry_backoff_ms = 50\n"
        f"relay_retry_backoff_max_ms = 400\n"
        f"[replication.t]\nleader = \"{leader.address}\"\n"))
    try:
        leader.start()
        follower.start()
        create_topic(stub(leader.address), "t")
        produce_records(leader.address, 0, 1, 10)
        wait_for(lambda: events(follower.address, "t") == 10, 20, "the follower copied")
        assert is_leader(leader_port) == 1
        assert is_leader(follower_port) == 0
        stub(leader.address).DeleteTopic(pb.DeleteTopicRequest(topic="t"), timeout=30)
        assert is_leader(leader_port) is None  # it leads no t any more
    finally:
        follower.stop()
        leader.stop()
