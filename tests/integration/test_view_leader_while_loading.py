"""A follower that becomes the leader while its compacted view waits to be loaded.

Goal: a Bootstrap never serves a snapshot that silently misses keys. A
follower whose copy restarted at its upstream's start offset (the upstream's
retention removed offsets it had not copied) marks its view to be loaded from
the upstream's (broker/view/load.py). Made leader before that load finished,
no upstream will load it: it folds the view from its own log, which lacks
every key written only below that start. Before, Bootstrap on it then served
that view as the partition's state, with no sign of the keys it lacked; now
it is refused (UNAVAILABLE, `view_incomplete`) naming the offset, why, and
what to do, until the view is complete again (every key written at or after
that offset: here, the keys written again).

Method: a leader and a follower broker process with static relay config (no
ZooKeeper). The leader trims every 50 ms and serves one Bootstrap at a time
(`bootstrap_streams_max = 1`), held by a reader that does not read on (its
stream waits on flow control in the snapshot), so the follower's load is
refused and retried while its log copies on: a load in progress, held. The leader is then stopped
and the follower restarted as the topic's leader (the path an election takes:
`become_leader` folds a marked view from the log). Every wait is bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from keybus.dev_cluster import BrokerRunner
from sdk import Reader, errors
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from tests.support.relay_cluster import wait_for
from tests.support.relay_pair import EVENTS, offsets, produce_records, relay_pair, unchanged_for
from tests.support.wire import stub


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[BrokerRunner, BrokerRunner]]:
    with relay_pair(tmp_path, leader_settings="bootstrap_streams_max = 1\n") as both:
        yield both


def bootstrap(address: str) -> set[int] | grpc.RpcError:
    """The keys of a Bootstrap of t/0, or the call's error."""
    keys: set[int] = set()
    try:
        for response in stub(address).Bootstrap(pb.BootstrapRequest(topic="t"), timeout=20):
            for record in response.records:
                keys.update(record.batch.key_ints)
    except grpc.RpcError as e:
        return e
    return keys


def test_a_follower_made_leader_mid_load_never_serves_a_snapshot_missing_keys(
        pair: tuple[BrokerRunner, BrokerRunner]) -> None:
    leader, follower = pair
    produce_records(leader.address, 0, 3)  # keys 0..29, never written again
    wait_for(lambda: offsets(follower.address) == (0, 3 * EVENTS), 15, "the follower copied")
    follower.stop()
    produce_records(leader.address, 1_000, 30)
    wait_for(lambda: offsets(leader.address)[0] > 3 * EVENTS, 30, "the leader trimmed")
    wait_for(unchanged_for(lambda: offsets(leader.address)[0], 1.5), 30,
             "the leader's retention settled")
    # no BDP probe: the stream's window stays 64 KB, the snapshot (~660 KB) waits on it
    channel = grpc.insecure_channel(leader.address, options=[("grpc.http2.bdp_probe", 0)])
    held = pb_grpc.KeybusStub(channel).Bootstrap(pb.BootstrapRequest(topic="t", events_max=1), timeout=60)
    next(held)  # in its snapshot, the only slot held while nothing reads on
    follower.start()
    wait_for(lambda: offsets(follower.address) == offsets(leader.address), 20,
             "the follower's copy restarted at the leader's start and copied on")
    start = offsets(follower.address)[0]
    wait_for(lambda: "loading it failed" in follower.log_path.read_text(), 10,
             "the follower's view load is refused by its upstream (held)")
    held.cancel()
    channel.close()
    leader.stop()
    follower.stop()
    follower.config.write_text("[replication.t]\n")  # it leads now
    follower.start()
    wait_for(lambda: "folding it" in follower.log_path.read_text(), 10,
             "the new leader folds its marked view from its log")
    in_log = 330 - start  # keys 1000 + start - 30 .. 1299, one event each in the log
    answers: list[set[int] | grpc.RpcError] = []

    def told() -> bool:
        """An answer other than "being folded again" (the fold at start, retried)."""
        answers.append(bootstrap(follower.address))
        answer = answers[-1]
        if isinstance(answer, set):
            return len(answer) >= in_log
        return "being folded again" not in str(answer.details())
    wait_for(told, 10, "the view folded the log")
    answer = answers[-1]
    assert isinstance(answer, grpc.RpcError), \
        f"served {len(answer)} keys, silently without the 240 only below offset {start}"
    assert answer.code() == grpc.StatusCode.UNAVAILABLE
    details = str(answer.details())
    assert f"lacks every key written only below offset {start}" in details, details
    assert "bootstrap from a broker whose view is complete" in details, details
    # asked to, it serves what it has, and says below which offset keys are missing
    served = list(stub(follower.address).Bootstrap(pb.BootstrapRequest(
        topic="t", allow_incomplete_view=True), timeout=20))
    [marker] = [r.marker for r in served
                if r.HasField("marker") and r.marker.phase == pb.SNAPSHOT]
    assert marker.keys_missing_below == start
    assert len({k for r in served for rec in r.records for k in rec.batch.key_ints}) == in_log
    # the SDK: refused at once by default (no retry serves it), told when it asks
    refused_sdk = asyncio.run(sdk_bootstrap(follower.address, False))
    assert refused_sdk.startswith("Unavailable: ") and \
        f"lacks every key written only below offset {start}" in refused_sdk, refused_sdk
    assert asyncio.run(sdk_bootstrap(follower.address, True)) == f"missing below {start}"


async def sdk_bootstrap(address: str, allow: bool) -> str:
    """What an SDK Reader's bootstrap of t/0 says: its error, or its snapshot marker."""
    try:
        async with Reader(address, "t", 0, start="bootstrap", retry_timeout_ms=30_000,
                          allow_incomplete_view=allow) as reader:
            async for batch in reader:
                if batch.marker is not None and batch.marker.phase == "snapshot":
                    return f"missing below {batch.marker.keys_missing_below}"
    except errors.KeybusError as e:
        return f"{type(e).__name__}: {e}"
    return "no marker"
