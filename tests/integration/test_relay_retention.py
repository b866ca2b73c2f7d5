"""A follower that falls behind its leader's retention.

Goal: a follower never keeps a silent hole and never gets stuck. When the
leader's retention removed offsets the follower has not copied, the follower
resets its copy to the leader's start offset (its readers then get the same
OUT_OF_RANGE for those offsets as the leader's), logs one WARNING naming the
partition and the offsets it could not copy, and copies on. Before, the copy's
read was refused (OUT_OF_RANGE) and retried for ever: (a) a follower restarted
after the leader trimmed what it had not copied; (b) a follower whose copy
stream the leader's retention overtook (the replica read skipped the removed
records, the follower refused the records past the gap, then its restart from
its log end was refused).

The topic keeps a compacted view (the broker's default). The follower's view
cannot be folded across the offsets it never copied: it is loaded from the
leader's, so a Bootstrap from the follower after the reset gives every key
the leader's does, keys written only in the removed offsets included (before,
those were silently missing), and `keybus_relay_follower_resets` counts the
reset once.

Method: a leader and a follower broker process with static relay config (no
ZooKeeper); the leader checks retention every 50 ms on a topic with a small
retention_bytes; the follower's own retention is left out (its check interval
is longer than the test). (a) stops the follower; (b) pauses it (SIGSTOP)
while it follows, so the leader's copy stream waits on flow control while
retention removes what it was about to send. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from keybus.dev_cluster import BrokerRunner, free_port
from sdk import Consumer
from sdk.core.pb import keybus_pb2 as pb
from tests.support.metrics import metrics_text
from tests.support.relay_cluster import cluster_story, records, wait_for
from tests.support.relay_pair import (
    EVENTS,
    VALUE_BYTES,
    offsets,
    produce_records,
    relay_pair,
    unchanged_for,
)
from tests.support.wire import stub


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[BrokerRunner, BrokerRunner]]:
    """A leader trimming every 50 ms and its follower, topic t created (1 partition)."""
    with relay_pair(tmp_path, follower_settings=f"metrics_port = {free_port()}\n") as both:
        yield both


def bases(address: str) -> list[int]:
    return [r.base_offset for r in records(address, "t")]


async def first_offset(address: str) -> int:
    """The offset of the first event subscription s (created at the earliest) delivers
    on `address`; nothing is acknowledged."""
    async with await Consumer.subscribe(address, "t", "s", type="shared",
                                        start="earliest") as consumer:
        return (await consumer.receive(10)).offset


class FollowingRead:
    """A Read with follow on the follower from `start`, in a thread: the offsets it
    got, in order, and how it ended."""

    def __init__(self, address: str, start: int) -> None:
        self.offsets: list[int] = []
        self.ended: grpc.RpcError | None = None
        self.call = stub(address).Read(pb.ReadRequest(
            topic="t", start=pb.StartPosition(offset=start), follow=True), timeout=40)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for response in self.call:
                for record in response.records:
                    self.offsets.extend(range(record.base_offset,
                                              record.base_offset + record.batch.count))
        except grpc.RpcError as e:
            self.ended = e


def bootstrap(address: str) -> dict[int, int]:
    """Key -> offset of its latest event, from a Bootstrap of t/0 (snapshot, then
    catch-up to the end)."""
    latest: dict[int, int] = {}
    for response in stub(address).Bootstrap(pb.BootstrapRequest(topic="t"), timeout=20):
        for record in response.records:
            offsets = list(record.offsets) or list(
                range(record.base_offset, record.base_offset + record.batch.count))
            latest.update(zip(record.batch.key_ints, offsets, strict=True))
    return latest


def loaded(address: str) -> bool:
    """A Bootstrap is served (False while the view is being loaded: UNAVAILABLE)."""
    try:
        list(stub(address).Bootstrap(pb.BootstrapRequest(topic="t", stop_offset=1), timeout=10))
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.UNAVAILABLE:
            raise
        assert "bootstrap from the leader" in str(e.details()), e.details()
        return False
    return True


def reset_counts(follower: BrokerRunner) -> list[str]:
    """The follower's reset counter lines for t/0."""
    port = int(re.findall(r"metrics_port = (\d+)", follower.config.read_text())[0])
    return [line for line in metrics_text(port).splitlines()
            if line.startswith("keybus_relay_follower_resets_total{") and 'topic="t"' in line]


def check_view(leader: BrokerRunner, follower: BrokerRunner, only_removed: int) -> None:
    """A Bootstrap from the follower gives what one from the leader gives, including
    key `only_removed`, written only in offsets removed before the follower copied."""
    wait_for(lambda: loaded(follower.address), 20, "the follower serves Bootstrap")
    on_leader, on_follower = bootstrap(leader.address), bootstrap(follower.address)
    assert only_removed in on_leader
    missing = sorted(set(on_leader) - set(on_follower))
    assert not missing, f"{len(missing)} keys missing on the follower, from {missing[:5]}"
    assert on_follower == on_leader


def check_reset(leader: BrokerRunner, follower: BrokerRunner, missed_from: int) -> None:
    """The follower holds what the leader holds, says where it reset once, refuses the
    removed offsets as the leader does, counts the reset, serves the leader's view,
    and copies on."""
    try:
        wait_for(lambda: offsets(follower.address) == offsets(leader.address), 20,
                 "the follower holds the leader's start..end")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{cluster_story([leader, follower], 't')}") from None
    start, end = offsets(leader.address)
    assert missed_from < start, (missed_from, start)
    assert bases(follower.address) == bases(leader.address)
    for address in (leader.address, follower.address):
        with pytest.raises(grpc.RpcError) as refused:
            list(stub(address).Read(pb.ReadRequest(topic="t", start=pb.StartPosition(
                offset=missed_from)), timeout=10))
        assert refused.value.code() == grpc.StatusCode.OUT_OF_RANGE
        assert f"start offset {missed_from} of t/0 was removed by retention" \
            in str(refused.value.details())
    log = follower.log_path.read_text()
    lines = [line for line in log.splitlines() if "WARNING" in line and "t/0" in line]
    resets = [line for line in lines if "removed by retention" in line]
    assert len(resets) == 1, "\n".join(lines)
    found = re.search(r"offsets (\d+)\.\.(\d+)", resets[0])
    assert found is not None and missed_from <= int(found[1]) < start \
        and int(found[2]) == start - 1, resets[0]
    assert "failed" not in "\n".join(lines), "\n".join(lines)  # no retried failure
    assert reset_counts(follower) == ['keybus_relay_follower_resets_total{partition="0",topic="t"} 1.0']
    check_view(leader, follower, 1_000)
    produce_records(leader.address, 10_000, 2)
    wait_for(lambda: offsets(follower.address)[1] == end + 2 * EVENTS, 10, "copies on")
    wait_for(lambda: bootstrap(follower.address) == bootstrap(leader.address), 15,
             "the follower's view folds on from the loaded one")


def test_a_restarted_follower_resets_to_the_leaders_start(
        pair: tuple[BrokerRunner, BrokerRunner]) -> None:
    """(a) The follower is stopped; the leader's retention removes what it has not copied."""
    leader, follower = pair
    produce_records(leader.address, 0, 3)
    wait_for(lambda: offsets(follower.address) == (0, 3 * EVENTS), 15, "the follower copied")
    assert asyncio.run(first_offset(follower.address)) == 0
    follower.stop()
    produce_records(leader.address, 1_000, 30)
    wait_for(lambda: offsets(leader.address)[0] > 3 * EVENTS, 30, "the leader trimmed")
    wait_for(unchanged_for(lambda: offsets(leader.address), 1.5), 30,
             "the leader's retention settled")  # as in (b)
    follower.start()
    check_reset(leader, follower, 3 * EVENTS)
    # the subscription's cursor (0) is below the new start: it goes on from there
    assert asyncio.run(first_offset(follower.address)) == offsets(follower.address)[0]


def test_retention_overtaking_a_copy_stream_resets_the_follower(
        pair: tuple[BrokerRunner, BrokerRunner]) -> None:
    """(b) The follower is paused while it follows: the leader's copy stream waits on
    flow control, retention removes what it would send next, the follower goes on."""
    leader, follower = pair
    produce_records(leader.address, 0, 3)
    wait_for(lambda: offsets(follower.address) == (0, 3 * EVENTS), 15, "the follower copied")
    read = FollowingRead(follower.address, 3 * EVENTS)  # waits at the follower's end
    os.kill(follower.pid, signal.SIGSTOP)
    try:
        # 16 MB in records of 200 KB: past what the stream's window and the sockets hold
        produce_records(leader.address, 1_000, 80, 20 * VALUE_BYTES)
        wait_for(lambda: offsets(leader.address)[0] > 60 * EVENTS, 30, "the leader trimmed")
        # ... and is done trimming: a follower that resets to the leader's start while
        # the leader trims on keeps the older start (its own retention is left out),
        # which a loaded machine's slower retention made happen (770 against 820)
        wait_for(unchanged_for(lambda: offsets(leader.address), 1.5), 30,
                 "the leader's retention settled")
    finally:
        os.kill(follower.pid, signal.SIGCONT)
    check_reset(leader, follower, 3 * EVENTS)
    # A reader of the follower never skips across the reset: it got what the follower
    # held, in order, then OUT_OF_RANGE for what the reset removed.
    read.thread.join(10)
    assert read.ended is not None and read.ended.code() == grpc.StatusCode.OUT_OF_RANGE, \
        (read.ended, read.offsets[-3:])
    got = read.offsets
    assert got == list(range(3 * EVENTS, 3 * EVENTS + len(got))), got
    assert "removed by retention" in str(read.ended.details())
