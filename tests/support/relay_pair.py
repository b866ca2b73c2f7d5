"""A leader that trims its log and a follower of topic t, as broker processes, and
what the tests of retention under relaying ask of them.

Shared by test_relay_retention.py and test_view_leader_while_loading.py. The
leader checks retention every 50 ms and folds its view every 200 ms (not 5 s:
retention never removes what the view has not folded, and these tests wait for
the leader's trim); the follower never trims and retries its upstream fast.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from keybus.dev_cluster import BrokerRunner, free_port
from sdk.core.pb import keybus_pb2 as pb
from tests.support.wire import int_batch, produce, stub

EVENTS, VALUE_BYTES = 10, 2_000  # a record of about 20 KB
RETENTION_BYTES = 200_000  # the leader keeps about ten records


def broker(root: Path, name: str, config: str) -> BrokerRunner:
    path = root / f"{name}.toml"
    path.write_text(config)
    return BrokerRunner(root / name, free_port(), path)


@contextmanager
def relay_pair(root: Path, leader_settings: str = "", follower_settings: str = ""
               ) -> Iterator[tuple[BrokerRunner, BrokerRunner]]:
    """The leader and its follower started, topic t created (1 partition); each
    `*_settings` is TOML lines added to that broker's."""
    leader = broker(root, "leader", "retention_check_interval_ms = 50\nview_linger_ms = 200\n"
                    f"{leader_settings}[replication.t]\n")
    follower = broker(root, "follower", (
        f"{follower_settings}retention_check_interval_ms = 600000\nrelay_retry_backoff_ms = 50\n"
        f"relay_retry_backoff_max_ms = 500\n[replication.t]\nupstream = \"{leader.address}\"\n"))
    try:
        leader.start()
        follower.start()
        stub(leader.address).CreateTopic(pb.CreateTopicRequest(topic="t", config=pb.TopicConfig(
            partitions=1, retention_bytes=RETENTION_BYTES)), timeout=10)
        yield leader, follower
    finally:
        follower.stop()
        leader.stop()


def produce_records(address: str, first_key: int, count: int,
                    value_bytes: int = VALUE_BYTES) -> None:
    """`count` records of EVENTS events each, keys from first_key, to t/0."""
    client = stub(address)
    for k in range(first_key, first_key + count * EVENTS, EVENTS):
        produce(client, [pb.ProduceRequest(topic="t", batch=int_batch(
            list(range(k, k + EVENTS)), b"x" * value_bytes))])


def offsets(address: str) -> tuple[int, int]:
    """(start offset, end offset) of t/0; (-1, -1) while the broker cannot say."""
    try:
        info = stub(address).DescribeTopic(pb.DescribeTopicRequest(topic="t"), timeout=2)
    except grpc.RpcError:
        return -1, -1
    part = info.partitions[0] if info.partitions else None
    return (part.start_offset, part.end_offset) if part else (-1, -1)


def unchanged_for(read: Callable[[], object], quiet_s: float) -> Callable[[], bool]:
    """A condition: `read()` gave the same value for the last `quiet_s` seconds."""
    last: list[object] = [object(), 0.0]

    def condition() -> bool:
        value, now = read(), time.monotonic()
        if value != last[0]:
            last[:] = [value, now]
        return now - float(last[1]) >= quiet_s  # type: ignore[arg-type]
    return condition
