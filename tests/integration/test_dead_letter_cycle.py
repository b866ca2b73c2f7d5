"""Dead-letter cycles across subscriptions, refused by a real broker.

Goal: subscription S1 on A dead-lettering to D, with S2 on D dead-lettering
back to A, bounced one poison event between the topics for ever. A consumer
whose new subscription would close such a cycle (of two topics or more) gets
FAILED_PRECONDITION naming the cycle and what to do, and nothing is created;
a chain that ends (A -> D, D -> E) is accepted.
Method: one broker process, real SDK consumers and SubscriptionAdmin.
"""

from __future__ import annotations

import asyncio

import pytest

from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.errors import FailedPrecondition
from sdk.subscription_admin import SubscriptionAdmin
from tests.support.broker_process import BrokerProcess


def test_a_dead_letter_cycle_is_refused_and_a_chain_accepted(
        shared_broker: BrokerProcess) -> None:
    address = shared_broker.address

    async def go() -> None:
        async with Admin(address) as admin:
            for topic in ("cyc-a", "cyc-d", "cyc-e"):
                await admin.create_topic(topic, partitions=1)
        chain = [await Consumer.subscribe(address, "cyc-d", "s2", type="shared",
                                          max_redeliveries=1, dead_letter_topic="cyc-e"),
                 await Consumer.subscribe(address, "cyc-a", "s1", type="shared",
                                          max_redeliveries=1, dead_letter_topic="cyc-d")]
        with pytest.raises(FailedPrecondition) as two:
            await Consumer.subscribe(address, "cyc-d", "back", type="shared",
                                     max_redeliveries=1, dead_letter_topic="cyc-a")
        assert ("subscription 'back' on topic 'cyc-d' would close a dead-letter cycle: 'cyc-d' "
                "-[subscription 'back']-> 'cyc-a' -[subscription 's1']-> 'cyc-d';") in str(two.value)
        with pytest.raises(FailedPrecondition) as three:
            await Consumer.subscribe(address, "cyc-e", "s3", type="shared",
                                     max_redeliveries=1, dead_letter_topic="cyc-a")
        assert ("'cyc-e' -[subscription 's3']-> 'cyc-a' -[subscription 's1']-> 'cyc-d' "
                "-[subscription 's2']-> 'cyc-e'") in str(three.value)
        assert "keybus subscriptions delete TOPIC SUBSCRIPTION" in str(three.value)
        async with SubscriptionAdmin(address) as sub_admin:
            assert [i.subscription for i in await sub_admin.list_subscriptions("cyc-d")] == ["s2"]
            assert await sub_admin.list_subscriptions("cyc-e") == []
            info = await sub_admin.describe_subscription("cyc-a", "s1")
            assert info.dead_letter_topic == "cyc-d"
        for consumer in chain:
            await consumer.close()

    asyncio.run(go())
