"""Key_Shared Databus consumers learn from the broker where their window shares end.

Goal: two callback consumers share one Key_Shared subscription, so each gets
part of every window. Each must present its share of a window once, whole,
and at once. The linger (wait until nothing more comes) is set to 60 s here,
longer than the test may take: only the broker's word (`Delivery.open_windows`)
can close a share that lacks the window's last event, so a broker or SDK
that does not say or does not listen fails this test (the last window never
closes). With 4 permits a consumer gets its share of a 40-event window over
several deliveries: the ones before the last must not close it, whether the
window is buffered whole or streamed to the callbacks part by part.

Method: a real broker process, two `DatabusClient`s in this process on the
same subscription (auto-split ranges, both attached before the first event),
windows produced by `send_window`; every presented window is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from sdk import Admin
from sdk.consumer import ConsumerConfig
from sdk.databus import DatabusClient, DatabusConfig
from tests.integration.test_databus_failures import Applying, produce, until
from tests.support.broker_process import BrokerProcess

LINGER_MS = 60_000  # longer than the test's own deadline: no share may wait for it


@pytest.mark.parametrize(("size", "permits", "buffering"),
                         [(20, 1000, True), (40, 4, True), (40, 4, False)])
def test_each_share_closes_on_the_brokers_word_not_on_the_linger(
        tmp_path: Path, size: int, permits: int, buffering: bool) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    consumers = [Applying(event_sleep_s=0) for _ in range(2)]

    async def go() -> list[tuple[int, list[int]]]:
        async with Admin(broker.address) as admin:
            await admin.create_topic("shares", partitions=1)
        config = DatabusConfig(window_linger_ms=LINGER_MS, checkpoint_windows_n=1,
                               window_buffering=buffering)
        async with contextlib.AsyncExitStack() as clients:
            for consumer in consumers:
                client = DatabusClient(broker.address, config=config)
                client.register_shared(consumer, topic="shares", subscription="shares",
                                       consumer_config=ConsumerConfig(
                                           type="key_shared", start="earliest",
                                           receiver_queue_size=permits))
                await clients.enter_async_context(client)
            made = await produce(broker.address, "shares", 0, 6, size)
            expected = {offset for _, offsets in made for offset in offsets}
            await until(lambda: {o for c in consumers for _, window in c.windows
                                 for o in window} >= expected, 30)
        return made

    try:
        made = asyncio.run(go())
    finally:
        broker.stop()
    for consumer in consumers:
        assert consumer.errors == [] and consumer.rollbacks == []
        scns = [scn for scn, _ in consumer.windows]
        assert len(scns) == len(set(scns)), "a share was presented in pieces"
    shares = [dict(c.windows) for c in consumers]
    assert all(len(s) > 3 for s in shares), "each consumer gets part of most windows"
    for scn, offsets in made:
        presented = [share.get(scn, []) for share in shares]
        assert sorted(presented[0] + presented[1]) == offsets  # each event once, in one share
        assert all(p == sorted(p) for p in presented)
