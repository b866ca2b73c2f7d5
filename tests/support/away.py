"""A topic changed while its reader's broker is away: helpers of the incarnation tests.

The reader's broker is killed; a second broker process on the same data
directory, on another port the reader does not know, deletes and re-creates the
topic (or only adds to it); then the first broker serves again. The reader,
retrying all along, meets the changed topic only at its reconnect.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sdk.admin import Admin
from sdk.producer import Producer
from sdk.reader import Reader
from tests.support.broker_process import BrokerProcess

WITHIN_S = 30.0  # the reader's retry and a broker start on a loaded 2-core machine


async def produce(address: str, topic: str, values: list[bytes]) -> None:
    """Send `values` to partition 0 of `topic` (keys 0, 1, ...) and wait for every answer."""
    async with await Producer.create(address, topic) as producer:
        futures = [await producer.send(key, value, partition=0)
                   for key, value in enumerate(values)]
        await asyncio.gather(*futures)


async def read_values(reader: Reader, count: int) -> list[bytes]:
    """The values of the reader's next `count` events (a bootstrap's markers carry none)."""
    values: list[bytes] = []
    while len(values) < count:
        batch = await asyncio.wait_for(reader.__anext__(), WITHIN_S)
        values += batch.values if batch.marker is None else []
    return values


def change_while_away(tmp_path: Path, broker: BrokerProcess, topic: str, recreate: bool,
                      view: bool = False) -> None:
    """With `broker` killed: a second broker on its data directory (tmp_path/"data",
    another free port) re-creates `topic` with new-0..4 (with a compacted view when
    `view`), or adds old-3 and old-4 to it; then `broker` serves again."""
    broker.kill()
    other = BrokerProcess(tmp_path / "data")  # another free port: the reader cannot reach it

    async def change() -> None:
        if recreate:
            async with Admin(other.address) as admin:
                await admin.delete_topic(topic)
                await admin.create_topic(topic, 1, view=view)
            await produce(other.address, topic, [b"new-%d" % i for i in range(5)])
        else:
            await produce(other.address, topic, [b"old-3", b"old-4"])

    other.start()
    try:
        asyncio.run(asyncio.wait_for(change(), WITHIN_S))
    finally:
        other.stop()
    broker.start()
