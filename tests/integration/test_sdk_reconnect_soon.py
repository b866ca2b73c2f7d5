"""Clients come back with a restarted broker, not a backoff later.

Goal: a producer, a consumer and a following reader that lost their broker
carry on within about a second of it serving again (gRPC's reconnect backoff,
sdk/channel.py), however long their own retry backoff: a retry waits for its
channel to connect again (`retry_wait`), not for the whole delay. Before, each
slept its backoff, so a broker back after 2 s was used up to a backoff later
(1-2 s at the defaults' caps; here, 20 s).
Method: a real broker process killed with SIGKILL and started again on the same
port and data directory; the clients' backoffs are set to 20 s, so a client
that sleeps it cannot pass.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sdk import Admin, Consumer, Producer, TopicReader
from tests.support.broker_process import BrokerProcess

BACKOFF_MS = 20_000
# Well under the backoff; what the clients need after the broker serves is gRPC's
# reconnect backoff (at most 1 s) and a round trip, on a loaded machine a few s.
BACK_WITHIN_S = 10.0


def test_clients_resume_when_the_broker_serves_again(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    backoff = {"retry_backoff_ms": BACKOFF_MS, "retry_backoff_max_ms": BACKOFF_MS}

    async def go() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("soon", 1)
        producer = await Producer.create(broker.address, "soon", **backoff)
        consumer = await Consumer.subscribe(broker.address, "soon", "s", type="exclusive",
                                            **backoff)
        reader = TopicReader(broker.address, "soon", follow=True, start="latest", **backoff)
        await reader.open()  # positioned at the end: "before" is read
        await producer.send(1, b"before")
        assert (await consumer.receive(20)).value == b"before"
        assert (await asyncio.wait_for(reader.__anext__(), 20)).values == [b"before"]

        broker.kill()
        await asyncio.sleep(0.5)  # each client's stream has failed: its retry is waiting
        sent = producer.send_nowait(2, b"after")
        await asyncio.to_thread(broker.start)
        serving = time.monotonic()

        await asyncio.wait_for(sent, BACK_WITHIN_S)
        acked_s = time.monotonic() - serving
        while (await consumer.receive(BACK_WITHIN_S)).value != b"after":
            pass  # "before" again: its ack may not have been stored (at least once)
        received_s = time.monotonic() - serving
        batch = await asyncio.wait_for(reader.__anext__(), BACK_WITHIN_S)
        assert batch.values == [b"after"]
        read_s = time.monotonic() - serving
        # Each within BACK_WITHIN_S of the broker serving, by the waits above; the
        # figures say how soon, for the log.
        print(f"after the broker served again: acked {acked_s:.2f} s, received "
              f"{received_s:.2f} s, read {read_s:.2f} s")
        await reader.close()
        await consumer.close()
        await producer.close()

    try:
        asyncio.run(asyncio.wait_for(go(), 120))
    finally:
        broker.stop()
