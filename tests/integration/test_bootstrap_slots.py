"""bootstrap_streams_max bounds snapshots and catch-ups, not followers.

Goal: readers that bootstrapped and now follow the live log (ONLINE) do not
hold a slot, so with a limit of N, N+1 followers are all served and a
bootstrap after them is too (before, the (N+1)-th got RESOURCE_EXHAUSTED
for as long as the others followed).
Method: one broker process with --bootstrap-streams-max 2; a topic of a few
events; three follow=True Bootstrap calls, each read up to its ONLINE
marker and left open, then a fourth without follow read to its end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from sdk.core.pb import keybus_pb2 as pb
from tests.support.broker_process import BrokerProcess
from tests.support.wire import create_topic, int_batch, produce, stub

LIMIT = 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("bootstrap-slots") / "data"
    process = BrokerProcess(data, "--bootstrap-streams-max", str(LIMIT))
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _until_online(call: Iterator[pb.BootstrapResponse]) -> list[int]:
    """The phases seen up to and including the ONLINE marker."""
    phases = []
    for message in call:
        if message.HasField("marker"):
            phases.append(message.marker.phase)
            if message.marker.phase == pb.ONLINE:
                return phases
    raise AssertionError(f"the stream ended before ONLINE (markers {phases})")


def test_followers_past_their_catch_up_give_their_slot_back(broker: BrokerProcess) -> None:
    client = stub(broker.address)
    create_topic(client, "followed")
    assert produce(client, [pb.ProduceRequest(topic="followed", batch=int_batch(
        list(range(5))))])[0].error_code == 0
    followers = []
    try:
        for _ in range(LIMIT + 1):
            call = client.Bootstrap(pb.BootstrapRequest(topic="followed", follow=True),
                                    timeout=60)
            followers.append(call)
            assert _until_online(call) == [pb.SNAPSHOT, pb.CATCHUP, pb.ONLINE]
        once = list(client.Bootstrap(pb.BootstrapRequest(topic="followed"), timeout=60))
        assert once[0].marker.phase == pb.SNAPSHOT and once[-1].next_offset == 5
    finally:
        for call in followers:
            call.cancel()
    for call in followers:
        assert call.code() == grpc.StatusCode.CANCELLED
