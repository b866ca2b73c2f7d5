"""EventProcessor and DatabusClient over TLS with a token (`security=`).

Goal: the two callback clients take `security=` as Producer/Consumer/Reader/
Admin do, and use it on every channel they open: the processor's reads and
its broker-held ownership and checkpoint stores; the Databus client's log
registrations (reads, and a broker-held checkpoint store) and Key_Shared
registrations. Without it they are refused (the broker wants TLS and a token).
Method: one broker process with TLS and static tokens (tests/support/security);
alice may produce, consume and administer "sec.*"; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sdk.access_admin import AccessAdmin
from sdk.admin import Admin
from sdk.databus import DatabusClient, DatabusConsumerBase, DbusEvent
from sdk.processor.processor import EventProcessor
from sdk.producer import Producer
from sdk.reader import ReadBatch
from sdk.stores.broker_stores import BrokerCheckpointStore
from tests.support.broker_process import BrokerProcess
from tests.support.security import SUPERUSER, SecureSetup

WAIT_S = 30.0
EVENTS = 30


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    return SecureSetup.make(tmp_path_factory.mktemp("tls-callbacks"))


@pytest.fixture(scope="module")
def secure_broker(setup: SecureSetup, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("secure-callbacks") / "data",
                            *setup.broker_args(jwt_tokens=False))
    process.start()

    async def prepare() -> None:
        async with AccessAdmin(process.address, security=setup.security(SUPERUSER)) as admin:
            await admin.grant("alice", "sec.*", ["produce", "consume", "admin"])
    asyncio.run(prepare())
    yield process
    process.stop()


async def _fill(address: str, topic: str, security: Any) -> None:
    async with Admin(address, security=security) as admin:
        await admin.create_topic(topic, partitions=2)
    async with await Producer.create(address, topic, security=security) as producer:
        for key in range(EVENTS):
            await producer.send(key, b"v%d" % key)
        await producer.flush()


async def _wait_until(done: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def test_event_processor_reads_and_checkpoints_over_tls_with_a_token(
        secure_broker: BrokerProcess, setup: SecureSetup) -> None:
    alice = setup.security("alice")

    async def go() -> None:
        await _fill(secure_broker.address, "sec.processor", alice)
        seen: list[int | str] = []

        async def on_event(context: Any, batch: ReadBatch) -> None:
            seen.extend(event.key for event in batch.events())
            await context.update_checkpoint(batch)

        processor = EventProcessor(secure_broker.address, "sec.processor", "g",
                                   on_event=on_event, load_balancing_interval_ms=500,
                                   security=alice)
        async with processor:
            await _wait_until(lambda: len(seen) >= EVENTS)
        assert sorted(seen) == list(range(EVENTS))
        async with BrokerCheckpointStore(secure_broker.address, security=alice) as store:
            checkpoints = await store.list_checkpoints("", "sec.processor", "g")
        assert sum(c.offset + 1 for c in checkpoints) == EVENTS  # stored in the broker

    asyncio.run(asyncio.wait_for(go(), WAIT_S * 3))


def test_event_processor_without_security_is_refused(secure_broker: BrokerProcess) -> None:
    errors: list[BaseException] = []

    async def go() -> None:
        processor = EventProcessor(secure_broker.address, "sec.processor", "g2",
                                   on_event=lambda context, batch: None,
                                   on_error=lambda context, error: errors.append(error),
                                   load_balancing_interval_ms=500)
        async with processor:
            await _wait_until(lambda: bool(errors))

    asyncio.run(asyncio.wait_for(go(), WAIT_S * 2))


class Collect(DatabusConsumerBase):
    def __init__(self) -> None:
        self.keys: list[Any] = []

    def on_event(self, event: DbusEvent) -> None:  # type: ignore[override]
        self.keys.append(event.key)


def test_databus_client_log_and_shared_registrations_over_tls_with_a_token(
        secure_broker: BrokerProcess, setup: SecureSetup) -> None:
    alice = setup.security("alice")

    async def go() -> None:
        await _fill(secure_broker.address, "sec.databus", alice)
        logged, shared = Collect(), Collect()
        checkpoints = BrokerCheckpointStore(secure_broker.address, security=alice)
        client = DatabusClient(secure_broker.address, checkpoint_store=checkpoints,
                               security=alice)
        client.register(logged, topic="sec.databus", name="billing")
        client.register_shared(shared, topic="sec.databus", subscription="shipping")
        async with client:
            await _wait_until(lambda: len(logged.keys) >= EVENTS and len(shared.keys) >= EVENTS)
        await checkpoints.close()
        assert sorted(logged.keys) == list(range(EVENTS))
        assert sorted(shared.keys) == list(range(EVENTS))

    asyncio.run(asyncio.wait_for(go(), WAIT_S * 3))
