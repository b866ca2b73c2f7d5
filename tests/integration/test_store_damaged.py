"""A damaged block in the log: readers get what lies before it, then a clear error.

Goal: a block of the log that RocksDB cannot read (its checksum fails: a bad
disk or a damaged file) is never taken for the end of the log. Before, an
iterator that met it simply stopped, so a follow read waited for good on
events that were there, a Key_Shared consumer's dispatcher counted the
damaged span as read (its cursor would have moved past it), and nothing was
logged. Now a Read gets every event before the damage and then DATA_LOSS
naming the partition and the offset; a consumer gets the same events, none
past the damage, and is told why it cannot go on; the broker logs it and
serves its other topics.
Method: a real broker process writes 3,000 events of 2 KB to one partition,
stops cleanly (RocksDB flushes them to an SST file), and one byte in the
middle of that file is flipped; the broker is started again on it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import grpc

from sdk import Consumer, Producer
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb
from tests.support.broker_process import BrokerProcess
from tests.support.wire import create_topic, stub

EVENTS = 3_000
VALUE_BYTES = 2_000


async def _fill(address: str) -> None:
    async with await Producer.create(address, "damaged") as producer:
        futures = [await producer.send(k, os.urandom(VALUE_BYTES)) for k in range(EVENTS)]
        await asyncio.gather(*futures)


def _flip_a_byte_mid_log(data_dir: Path) -> None:
    tables = sorted((data_dir / "log.rocksdb").glob("*.sst"), key=lambda p: p.stat().st_size)
    assert tables and tables[-1].stat().st_size > EVENTS * VALUE_BYTES // 2, tables
    with open(tables[-1], "r+b") as f:
        f.seek(tables[-1].stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


def _read_until_refused(address: str) -> tuple[list[int], grpc.RpcError]:
    """Follow-read from 0 with gRPC's default limits; the offsets read and the error."""
    offsets: list[int] = []
    request = pb.ReadRequest(topic="damaged", partition=0, follow=True,
                             start=pb.StartPosition(earliest=True))
    try:
        for response in stub(address).Read(request, timeout=30):
            for record in response.records:
                offsets += list(record.offsets) or list(
                    range(record.base_offset, record.base_offset + record.batch.count))
    except grpc.RpcError as e:
        return offsets, e
    raise AssertionError(f"the read ended without an error after {len(offsets)} events")


async def _consume(address: str, told: list[str]) -> list[int]:
    offsets: list[int] = []
    consumer = await Consumer.subscribe(
        address, "damaged", "s", type="key_shared", start="earliest",
        on_connection_change=lambda up, text: told.append(text) if not up else None)
    try:
        for _ in range(200):
            if told and len(told) >= 2:
                break
            try:
                batch = await consumer.receive_batch(timeout_s=0.5)
            except TimeoutError:
                continue
            offsets += batch.offsets
            consumer.ack_batch(batch)
    finally:
        await consumer.close()
    return offsets


def test_a_damaged_block_is_reported_never_taken_for_the_end(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        create_topic(stub(broker.address), "damaged")
        create_topic(stub(broker.address), "healthy")
        asyncio.run(_fill(broker.address))
    finally:
        broker.stop()
    _flip_a_byte_mid_log(tmp_path / "data")
    broker.start()
    try:
        offsets, error = _read_until_refused(broker.address)
        assert error.code() == grpc.StatusCode.DATA_LOSS, error
        assert "the log of damaged/0" in error.details() and "cannot be read" in error.details()
        assert 0 < len(offsets) < EVENTS and offsets == list(range(len(offsets)))

        told: list[str] = []
        consumed = asyncio.run(_consume(broker.address, told))
        assert told and "cannot be read" in told[0], told
        # each restart of the failing dispatcher may deliver again what was not acked on
        # disk yet (at least once), but never an event past the damage, and all before it
        assert sorted(set(consumed)) == offsets, "past the damage, or less than a read"

        log = broker.log_path.read_text()
        assert "ERROR keybus.store the log of damaged/0" in log and "Corruption" in log
        produced = stub(broker.address).Produce(iter([pb.ProduceRequest(
            topic="healthy", batch=pb.EventBatch(count=1, key_ints=[1], values=[b"up"],
                                                 slots=slots_of([1])))]), timeout=10)
        assert [r.error_code for r in produced] == [0]  # the rest of the store serves
    finally:
        broker.stop()

