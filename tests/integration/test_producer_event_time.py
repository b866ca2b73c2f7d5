"""An event time the wire cannot carry.

Goal: `event_time_ms` (and a bulk send's `event_times_ms`) outside int64 is
refused at the call, naming what is allowed, and the producer goes on. Before,
it was taken; protobuf's "Value out of range" then failed the batch's flush in
a loop callback (a traceback on stderr), the send's future never resolved, and
every later send of the producer hung too.
Method: one real broker for the module, a real SDK producer.
"""

from __future__ import annotations

import asyncio

import pytest

from sdk.admin import Admin
from sdk.producer import Producer
from tests.support.broker_process import BrokerProcess

STORED_WITHIN_S = 10.0  # liveness bound of one send, not a speed claim


def test_an_event_time_past_int64_is_refused_and_the_producer_goes_on(
        shared_broker: BrokerProcess) -> None:
    address = shared_broker.address

    async def go() -> None:
        async with Admin(address) as admin:
            await admin.create_topic("event-time-range", partitions=1)
        producer = await Producer.create(address, "event-time-range")
        for bad in (2**63, -2**63 - 1, 2**70):
            with pytest.raises(ValueError, match=r"event_time_ms is .*: out of range; allowed"):
                await producer.send(1, b"v", event_time_ms=bad)
        with pytest.raises(ValueError, match=r"event_times_ms\[1\] is .*: out of range"):
            await producer.send_batch([1, 2], [b"a", b"b"], event_times_ms=[5, 2**63])
        edge = await asyncio.wait_for(
            await producer.send(2, b"edge", event_time_ms=2**63 - 1), STORED_WITHIN_S)
        after = await asyncio.wait_for(await producer.send(3, b"after"), STORED_WITHIN_S)
        assert after.offset == edge.offset + 1
        await producer.close()

    asyncio.run(go())
