"""A partition that fails inside the broker: clients hear why, the broker stays up, service resumes.

Goal: an unexpected exception on one partition's task answers its produce
requests with UNAVAILABLE naming the partition and the cause (never a hang),
leaves the other partitions and the health service working, and once the
cause is gone an idempotent SDK producer that kept retrying gets every event
stored exactly once.
Method: the real broker (`start_broker`: real gRPC on 127.0.0.1, real
RocksDB) run in-process with a RocksStore subclass whose producer-state read
raises for partition 0 while a fault is set (the fault goes in through
start_broker's `store` argument; nothing in the broker knows about it). Every
wait is bounded.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import cast

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from broker.log.rocks_store import RocksStore
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.producer import Producer
from tests.support.in_process import broker_on
from tests.support.wire import events_of, int_batch

WAIT_S = 30.0
CHOSEN_ID = (1 << 63) + 11


class PartitionZeroFaults(RocksStore):
    """Raises on partition 0's producer-state reads while `fault` is set."""

    fault: Exception | None = None

    def load_producer(self, topic_id: int, partition: int, producer_id: int) -> bytes | None:
        if self.fault is not None and partition == 0:
            raise self.fault
        return super().load_producer(topic_id, partition, producer_id)


async def _raw_produce(stub: pb_grpc.KeybusAsyncStub, partition: int) -> pb.ProduceResponse:
    request = pb.ProduceRequest(topic="orders", partition=partition, batch=int_batch([1]),
                                producer_id=CHOSEN_ID + partition, sequence=0, request_id=5)
    call = stub.Produce(timeout=WAIT_S)
    await call.write(request)
    await call.done_writing()
    responses = [r async for r in call]
    assert len(responses) == 1
    return responses[0]


async def _stored_events(stub: pb_grpc.KeybusAsyncStub, partition: int) -> list[bytes]:
    request = pb.ReadRequest(topic="orders", partition=partition,
                             start=pb.StartPosition(earliest=True))
    records = [r async for response in stub.Read(request, timeout=WAIT_S)
               for r in response.records]
    return [value for _, _, value, _ in events_of(records)]


async def _scenario(tmp_path: Path) -> None:
    async with broker_on(tmp_path, PartitionZeroFaults) as (address, store), \
            grpc.aio.insecure_channel(address) as channel:
        stub = cast("pb_grpc.KeybusAsyncStub", pb_grpc.KeybusStub(channel))
        store.fault = OSError("injected disk error")
        refused = await _raw_produce(stub, 0)
        assert refused.error_code == grpc.StatusCode.UNAVAILABLE.value[0]
        assert "'orders'/0" in refused.error_message
        assert "injected disk error" in refused.error_message
        assert (await _raw_produce(stub, 1)).error_code == 0  # the other partition works
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=WAIT_S)
        assert health.status == health_pb2.HealthCheckResponse.SERVING

        producer = await Producer.create(address, "orders", idempotent=True,
                                         linger_ms=1, delivery_timeout_ms=int(WAIT_S * 1000))
        sent = [await producer.send(key, b"e%d" % key) for key in range(40)]
        deadline = time.monotonic() + WAIT_S  # partition 1 gets its events meanwhile
        while len(await _stored_events(stub, 1)) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not all(f.done() for f in sent)  # partition 0's wait on the fault
        store.fault = None
        await asyncio.wait_for(producer.flush(), WAIT_S)
        await producer.close()
        assert all(f.exception() is None for f in sent)
        stored = await _stored_events(stub, 0) + await _stored_events(stub, 1)
        expected = sorted(b"e%d" % key for key in range(40))
        assert sorted(v for v in stored if v.startswith(b"e")) == expected  # once each


def test_failed_partition_is_reported_isolated_and_reopened(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_scenario(tmp_path), WAIT_S * 4))
