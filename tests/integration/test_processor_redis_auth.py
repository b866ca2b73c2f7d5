"""A password-protected Redis as ownership store: the password never shows,
and a refused password is said to be one.

Goal: a wrong or missing password is reported as an authentication failure
(sdk.errors.Unauthenticated: a configuration error), not as "unreachable"
(redis-py's AuthenticationError is a ConnectionError); no message, neither
the store's nor what the processor hands to on_error, carries the
password; the right password works; without on_error the log warns once
over the failing cycles and says when balancing works again.
Method: a real redis-server started with --requirepass, a real broker
process; the processor runs in this process on a 0.5 s interval and its
on_error (or its log, through caplog) is polled with a bounded wait; the
configuration is "fixed" by giving the server the processor's password.
"""

from __future__ import annotations

import asyncio
import logging

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


async def set_password(port: int, current: str, new: str) -> None:
    """The server's password, changed over a connection that knows the current one."""
    import redis.asyncio as redis_asyncio

    client = redis_asyncio.Redis(host="127.0.0.1", port=port, password=current)
    try:
        await client.config_set("requirepass", new)
    finally:
        await client.aclose()


def test_a_refused_password_is_logged_once_per_outage(locked_redis: RedisServer,
                                                      broker: BrokerProcess,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Without on_error: one WARNING over several failing cycles (the rest at
    DEBUG), then one INFO once the configuration is fixed (here the server
    takes the password the processor has), never the password."""
    caplog.set_level(logging.DEBUG, logger="keybus.processor")
    given = SECRET + "x"  # what the processor's URL says; the server wants SECRET

    def said(level: int) -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.name == "keybus.processor" and r.levelno == level]

    async def on_event(context: PartitionContext, batch: ReadBatch) -> None:
        pass

    async def run() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("logged", partitions=2)
        store = RedisOwnershipStore(locked_redis.url.replace(SECRET, given),
                                    ttl_ms=EXPIRATION_MS)
        processor = EventProcessor(broker.address, "logged", "billing", on_event=on_event,
                                   ownership_store=store, load_balancing_interval_ms=INTERVAL_MS,
                                   ownership_expiration_ms=EXPIRATION_MS)
        async with processor:
            await wait_for(lambda: processor.stats.balancing_errors >= 4, 15,
                           "four failed cycles")
            await set_password(locked_redis.port, SECRET, given)
            try:
                await wait_for(lambda: processor.owned_partitions == [0, 1], 15,
                               "both partitions owned once the password is right")
            finally:
                await set_password(locked_redis.port, given, SECRET)
        await store.close()
    asyncio.run(run())
    warnings, repeats, recoveries = said(logging.WARNING), said(logging.DEBUG), said(logging.INFO)
    assert len(warnings) == 1, warnings
    assert "balancing failed (Unauthenticated)" in warnings[0]
    assert "refused the credentials" in warnings[0]
    repeats = [line for line in repeats if "balancing" in line]
    recoveries = [line for line in recoveries if "balancing" in line]
    assert len(repeats) >= 3 and all("still failing (Unauthenticated" in r for r in repeats)
    assert len(recoveries) == 1, recoveries
    assert "balancing works again after" in recoveries[0]
    assert "Unauthenticated" in recoveries[0] and "failed" in recoveries[0]
    assert not any(SECRET in r.getMessage() for r in caplog.records)
