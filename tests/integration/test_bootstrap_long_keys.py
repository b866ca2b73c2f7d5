"""A plain gRPC client bootstraps a view of ~60 KiB keys with default limits.

Goal: a client built from the published proto with gRPC's default receive
limit (4 MiB, the broker's default bytes_max) takes every SNAPSHOT message of
a view whose keys are long. Before, the first snapshot message here took
4,201,449 bytes, past 4,194,304 (the chunker reserved 4 KiB for the message's
fields, but its resume point repeats the chunk's last key): the client failed
with RESOURCE_EXHAUSTED on that message, and again at every retry.
Method: one broker process (real RocksDB), one partition of 120 string keys
of 60,000 characters (7 MB of keys, so the snapshot spans two messages at
least), the view folded up to the log's end; a Bootstrap over a plain
grpc.aio channel to 127.0.0.1 without options, read to its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import grpc
import pytest

from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from tests.support.bootstrap_model import wait_for_partition
from tests.support.broker_process import BrokerProcess
from tests.support.wire import create_topic, produce, stub

TOPIC = "long-keys"
KEYS = [f"{n:03d}" + "k" * 59_997 for n in range(120)]
GRPC_DEFAULT_RECEIVE_BYTES_MAX = 4 << 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("bootstrap-long-keys") / "data"
    process = BrokerProcess(data)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _fill(address: str) -> None:
    client = stub(address)
    create_topic(client, TOPIC)
    for first in range(0, len(KEYS), 10):
        keys = KEYS[first:first + 10]
        batch = pb.EventBatch(count=len(keys), key_strings=keys, slots=slots_of(keys),
                              values=[k[:3].encode() for k in keys])
        assert produce(client, [pb.ProduceRequest(topic=TOPIC, batch=batch)])[0].error_code == 0


async def _bootstrap(address: str) -> list[pb.BootstrapResponse]:
    async with grpc.aio.insecure_channel(address) as channel:  # gRPC's default limits
        client = cast("pb_grpc.KeybusAsyncStub", pb_grpc.KeybusStub(channel))
        return [m async for m in client.Bootstrap(pb.BootstrapRequest(topic=TOPIC),
                                                   timeout=60)]


def test_a_default_grpc_client_bootstraps_a_view_of_long_keys(broker: BrokerProcess) -> None:
    _fill(broker.address)
    asyncio.run(wait_for_partition(broker.address, TOPIC,
                                   lambda p: p.view_offset == len(KEYS), "the view"))
    messages = asyncio.run(_bootstrap(broker.address))
    snapshot = [m for m in messages if m.phase == pb.SNAPSHOT]
    assert len([m for m in snapshot if m.records]) >= 2  # the limit cut the snapshot
    assert max(m.ByteSize() for m in messages) <= GRPC_DEFAULT_RECEIVE_BYTES_MAX
    keys = [k for m in snapshot for r in m.records for k in r.batch.key_strings]
    assert keys == KEYS
    assert messages[-1].next_offset == len(KEYS)
