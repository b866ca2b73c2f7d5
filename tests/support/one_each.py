"""Topics and events for tests of a "latest" start: each round needs one acknowledged
event on every partition, so a skipped first event shows as a missing partition."""

from __future__ import annotations

import asyncio

from sdk import Admin, Producer


async def create_topic(address: str, topic: str, partitions: int) -> None:
    async with Admin(address) as admin:
        await admin.create_topic(topic, partitions)


async def produce_one_each(producer: Producer, tag: bytes, partitions: int) -> None:
    """One event on every partition, acknowledged (stored) before returning."""
    futures = [await producer.send(p, tag, partition=p) for p in range(partitions)]
    await asyncio.gather(*futures)
