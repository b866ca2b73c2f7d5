"""Goal: a producer whose topic is deleted and created again with fewer
partitions says so on every event it routes past the new count, naming the
cause and the remedy (a new producer), instead of only the broker's
"partition=3 is out of range", which names a partition the user never chose
(the key's hash did); a new producer then stores the event.

Method: one real broker process (tests/support/broker_process.py), the async
Producer under asyncio.run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk import errors
from sdk.admin import Admin
from sdk.producer import Producer
from tests.support.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process = BrokerProcess(Path(tmp_path_factory.mktemp("topic-changes")) / "data")
    process.start()
    yield process.address
    process.stop()


def test_a_topic_created_again_with_fewer_partitions_is_named(broker: str) -> None:
    async def scenario() -> None:
        async with Admin(broker) as admin:
            await admin.create_topic("shrunk", 4)
            producer = await Producer.create(broker, "shrunk")
            try:
                await admin.delete_topic("shrunk")
                await admin.create_topic("shrunk", 2)
                with pytest.raises(errors.InvalidArgument) as caught:
                    await asyncio.wait_for(await producer.send(1, b"v", partition=3), 30)
                said = str(caught.value)
                assert "partition=3 is out of range" in said and "fewer partitions than the " \
                    "4 this producer found" in said and "create a new producer" in said, said
            finally:
                await producer.close()
        async with await Producer.create(broker, "shrunk") as fresh:
            stored = await asyncio.wait_for(await fresh.send(1, b"v"), 30)
        assert stored.partition in (0, 1)

    asyncio.run(scenario())
