"""A Key_Shared consumer keeps receiving after its subscription's dispatcher failed once.

Goal: an unexpected exception in one subscription partition's dispatcher does
not leave that partition dead until a broker restart: the SDK consumer hears
UNAVAILABLE, reconnects on its own once the dispatcher restarted from its
persisted cursor, and receives every event produced after the failure, on
the failed partition and the other one.
Method: the real broker (`tests/support/in_process.py`: real gRPC on
127.0.0.1, real RocksDB) run in-process with a RocksStore subclass whose log reads of
partition 0 raise the next `failures` times (the fault goes in through
start_broker's `store` argument; nothing in the broker knows about it); a real
SDK producer and Key_Shared consumer. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

from broker.log.rocks_store import RocksStore
from sdk.consumer import Consumer
from sdk.producer import Producer
from tests.support.in_process import broker_on

WAIT_S = 30.0


class PartitionZeroReadFaults(RocksStore):
    """Log reads of partition 0 raise the next `failures` times."""

    failures = 0

    def records_from(self, topic_id: int, partition: int, offset: int) -> Iterator[tuple[int, bytes]]:
        if self.failures > 0 and partition == 0:
            self.failures -= 1
            raise OSError("injected read error")
        return super().records_from(topic_id, partition, offset)


async def _receive(consumer: Consumer, wanted: set[bytes]) -> set[bytes]:
    """Receive (and ack) until every value of `wanted` came; what came (bounded)."""
    got: set[bytes] = set()
    deadline = time.monotonic() + WAIT_S
    while not wanted <= got:
        assert time.monotonic() < deadline, f"missing {sorted(wanted - got)[:5]}..."
        message = await consumer.receive(timeout_s=WAIT_S)
        got.add(message.value)
        consumer.ack(message)
    return got


async def _produce(producer: Producer, prefix: bytes) -> set[bytes]:
    values = {prefix + b"%d" % key for key in range(40)}
    for key in range(40):
        await producer.send(key, prefix + b"%d" % key)
    await asyncio.wait_for(producer.flush(), WAIT_S)
    return values


async def _scenario(tmp_path: Path) -> None:
    async with broker_on(tmp_path, PartitionZeroReadFaults) as (address, store):
        producer = await Producer.create(address, "orders", linger_ms=1)
        consumer = await Consumer.subscribe(address, "orders", "s", type="key_shared",
                                            consumer_name="c1", start="earliest")
        try:
            await _receive(consumer, await _produce(producer, b"before-"))
            store.failures = 1  # the next read of partition 0's dispatcher fails
            after = await _produce(producer, b"after-")
            await _receive(consumer, after)  # the consumer reconnected on its own
            assert store.failures == 0  # the fault did fire
        finally:
            await consumer.close()
            await producer.close()


def test_a_key_shared_consumer_keeps_receiving_after_its_dispatcher_failed(
        tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_scenario(tmp_path), WAIT_S * 4))
