"""A poison event goes to the dead-letter topic alone, not with the rest of its key.

Goal: with `max_redeliveries`, an event the application keeps failing is
dead-lettered; the later events of its key wait behind it (per-key order) and
then reach the application. A nack takes back the rest of the key the consumer
holds (`Nack.rest_of_slots`) so the retry is not overtaken; those events were
counted as failed too, and the SDK named the ones it had prefetched in the nack
itself: after the poison event's last retry, every healthy event of its key
that the SDK had prefetched went to the dead-letter topic with it, never seen
by the application (9 events dead-lettered for 1 failed one).
Method: one real broker for the module, a real SDK consumer that nacks one
event every time it comes and acks all others; the dead-letter topic's size
and what the application saw are compared.
"""

from __future__ import annotations

import asyncio

import pytest

from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.producer import Producer
from tests.support.broker_process import BrokerProcess

EVENTS = 30
POISON = 3  # key "k0" (offsets 0, 3, 6, ..., 27)


@pytest.mark.parametrize("kind", ["key_shared", "exclusive"])
def test_only_the_failed_event_is_dead_lettered(shared_broker: BrokerProcess, kind: str) -> None:
    address = shared_broker.address
    topic = f"dlq-rest-{kind}"

    async def go() -> None:
        async with Admin(address) as admin:
            await admin.create_topic(topic, partitions=1)
            producer = await Producer.create(address, topic)
            await asyncio.gather(*[await producer.send(i, b"v%d" % i, ordering_key=f"k{i % 3}",
                                                       partition=0) for i in range(EVENTS)])
            await producer.close()
            consumer = await Consumer.subscribe(address, topic, "s", type=kind, start="earliest",
                                                max_redeliveries=2, nack_delay_ms=50)
            seen: list[int] = []
            try:
                for _ in range(EVENTS * 4):  # bounded: 29 acks and 3 nacks are enough
                    message = await consumer.receive(3.0)
                    seen.append(message.offset)
                    if message.offset == POISON:
                        consumer.nack(message)
                    else:
                        consumer.ack(message)
            except TimeoutError:
                pass
            await consumer.close()
            healthy = [o for o in range(EVENTS) if o != POISON]
            assert sorted(set(seen) - {POISON}) == healthy, "healthy events never reached the app"
            dead = (await admin.describe_topic(f"{topic}-s-DLQ")).partitions[0].end_offset
            assert dead == 1, f"{dead} events dead-lettered for one failed event"
            key = [o for o in seen if o % 3 == 0 and o != POISON]
            assert key == sorted(key), "the key's order was broken"

    asyncio.run(go())
