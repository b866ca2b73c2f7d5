"""A password-protected Redis as ownership store: the password never shows,
and a refused password is said to be one.

Goal: a wrong or missing password is reported as an authentication failure
(sdk.errors.Unauthenticated: a configuration error), not as "unreachable"
(redis-py's AuthenticationError is a ConnectionError); no message, neither
the store's nor what the processor hands to on_error, carries the
password; the right password works.
Method: a real redis-server started with --requirepass, a real broker
process; the processor runs in this process on a 0.5 s interval and its
on_error is polled with a bounded wait.
"""

from __future__ import annotations

import asyncio

import pytest

from sdk import Admin, errors
from sdk.processor import EventProcessor, PartitionContext
from sdk.reader import ReadBatch
from sdk.stores import PartitionOwnership, RedisOwnershipStore
from tests.support.broker_process import BrokerProcess
from tests.support.processors import EXPIRATION_MS, INTERVAL_MS, wait_for
from tests.support.redis_server import REDIS_PASSWORD, RedisServer

SECRET = REDIS_PASSWORD



async def refusal(url: str) -> errors.KeybusError:
    store = RedisOwnershipStore(url, ttl_ms=EXPIRATION_MS)
    try:
        with pytest.raises(errors.KeybusError) as refused:
            await store.list_ownership("", "orders", "billing")
    finally:
        await store.close()
    return refused.value


@pytest.mark.parametrize("password", [SECRET + "x", ""], ids=["wrong", "missing"])
def test_a_refused_password_is_an_authentication_error(locked_redis: RedisServer,
                                                       password: str) -> None:
    url = locked_redis.url.replace(f":{SECRET}@", f":{password}@" if password else "")
    error = asyncio.run(refusal(url))
    assert isinstance(error, errors.Unauthenticated), repr(error)
    message = str(error)
    assert "refused the credentials" in message and "configuration error" in message
    assert "unreachable" not in message
    assert SECRET not in message
    if password:
        assert f"redis://:***@127.0.0.1:{locked_redis.port}/0" in message


def test_the_right_password_works(locked_redis: RedisServer) -> None:
    async def claim() -> list[PartitionOwnership]:
        store = RedisOwnershipStore(locked_redis.url, ttl_ms=EXPIRATION_MS)
        try:
            assert SECRET not in store.url
            return await store.claim_ownership([PartitionOwnership("", "orders", "billing", 0,
                                                                   "worker-a")])
        finally:
            await store.close()
    assert [won.owner_id for won in asyncio.run(claim())] == ["worker-a"]


def test_the_processor_reports_it_without_the_password(locked_redis: RedisServer,
                                                        broker: BrokerProcess) -> None:
    reported: list[BaseException] = []

    async def on_event(context: PartitionContext, batch: ReadBatch) -> None:
        pass

    async def run() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("locked", partitions=2)
        store = RedisOwnershipStore(locked_redis.url.replace(SECRET, SECRET + "x"),
                                    ttl_ms=EXPIRATION_MS)
        processor = EventProcessor(broker.address, "locked", "billing", on_event=on_event,
                                   ownership_store=store, on_error=lambda c, e: reported.append(e),
                                   load_balancing_interval_ms=INTERVAL_MS,
                                   ownership_expiration_ms=EXPIRATION_MS)
        async with processor:
            await wait_for(lambda: len(reported) >= 2, 10, "two failed cycles reported")
            assert processor.owned_partitions == []
        await store.close()
    asyncio.run(run())
    assert all(isinstance(e, errors.Unauthenticated) for e in reported), reported
    assert all(SECRET not in str(e) and "refused the credentials" in str(e) for e in reported)
