"""`keybus processors ownership|checkpoints` against a real broker and redis-server.

Goal: an operator sees, per partition, who owns it (age, expires in, epoch)
in the broker's store or in Redis (--redis), and each checkpoint with its
lag to the end of the log; --json for scripts; bad input is one line and a
non-zero exit (2 for a bad --redis URL); a Redis password never shows.
Method: records written through the SDK stores, then `python -m keybus`
as a subprocess, as a user runs it.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from sdk import Admin
from sdk.stores import (
    BrokerCheckpointStore,
    BrokerOwnershipStore,
    Checkpoint,
    PartitionOwnership,
    RedisOwnershipStore,
)
from tests.e2e.test_cli import keybus, ok, one_line
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.processors import produce, redis_server  # noqa: F401
from tests.support.redis_server import REDIS_PASSWORD, RedisServer

SECRET = REDIS_PASSWORD


def test_ownership_and_checkpoints(shared_broker: BrokerProcess, redis_server: RedisServer  # noqa: F811
                                   ) -> None:
    broker = shared_broker.address

    async def prepare() -> None:
        async with Admin(broker) as admin:
            await admin.create_topic("cli-proc", partitions=3)
        await produce(broker, "cli-proc", 3, 10)
        async with BrokerOwnershipStore(broker) as ownership, \
                BrokerCheckpointStore(broker) as checkpoints:
            [a, b] = await ownership.claim_ownership([
                PartitionOwnership("", "cli-proc", "billing", 0, "worker-a"),
                PartitionOwnership("", "cli-proc", "billing", 1, "worker-b")])
            await ownership.claim_ownership([PartitionOwnership(
                "", "cli-proc", "billing", 1, "", b.etag)])
            await checkpoints.update_checkpoint(
                Checkpoint("", "cli-proc", "billing", 0, 4, 5, a.epoch))
        redis = RedisOwnershipStore(redis_server.url)
        await redis.claim_ownership([PartitionOwnership("", "cli-proc", "billing", 2, "worker-r")])
        await redis.close()
    asyncio.run(prepare())
    rows = json.loads(ok(keybus(shared_broker, "processors", "ownership", "cli-proc", "billing",
                                "--json")))
    assert [(r["partition"], r["owner"]) for r in rows] == [(0, "worker-a"), (1, ""), (2, None)]
    assert rows[0]["epoch"] >= 1 and 0 < rows[0]["expires_in_ms"] <= 60_000
    table = ok(keybus(shared_broker, "processors", "ownership", "cli-proc", "billing"))
    assert "worker-a" in table and "(released)" in table and "(never claimed)" in table
    in_redis = json.loads(ok(keybus(shared_broker, "processors", "ownership", "cli-proc", "billing",
                                    "--redis", redis_server.url, "--json")))
    assert [r["owner"] for r in in_redis] == [None, None, "worker-r"]
    checkpoints = json.loads(ok(keybus(shared_broker, "processors", "checkpoints", "cli-proc",
                                       "billing", "--json")))
    assert [(r["partition"], r["offset"], r["lag"]) for r in checkpoints] == [
        (0, 4, 5), (1, None, 10), (2, None, 10)]
    assert "lag" in ok(keybus(shared_broker, "processors", "checkpoints", "cli-proc", "billing"))


def test_bad_input_is_one_line(shared_broker: BrokerProcess) -> None:
    for args, needle in (
            (("processors", "checkpoints", "no-such-topic", "g"), "does not exist"),
            (("processors", "ownership", "no-such-topic", "g2"), "does not exist"),
            (("processors", "ownership", "no-such-topic", "g", "--redis",
              f"redis://127.0.0.1:{free_port()}/0"), "does not exist")):
        result = keybus(shared_broker, *args)
        assert result.returncode == 1 and needle in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    asyncio.run(_topic(shared_broker.address))
    result = keybus(shared_broker, "processors", "ownership", "cli-proc-bad", "g", "--redis",
                    f"redis://127.0.0.1:{free_port()}/0")
    assert result.returncode == 1 and "unreachable" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    result = keybus(shared_broker, "processors", "checkpoints", "cli-proc-bad", "bad group")
    assert result.returncode == 2 and "Invalid value for 'GROUP': 'bad group' is not a name" \
        in result.stderr, result.stderr  # refused before connecting (tests/e2e/test_cli_usage.py)


async def _topic(broker: str) -> None:
    async with Admin(broker) as admin:
        await admin.create_topic("cli-proc-bad")


@pytest.mark.parametrize(("url", "needle"), [
    ("nonsense", "the scheme must be one of redis://"),
    (f"redis://:{SECRET}@127.0.0.1:6379/abc", "redis://:***@127.0.0.1:6379/abc' is invalid: "
                                              "the path /abc is not a database number"),
])
def test_a_bad_redis_url_is_bad_usage(url: str, needle: str) -> None:
    line = one_line(keybus(None, "processors", "ownership", "t", "g", "--redis", url), 2)
    assert "'--redis'" in line and needle in line and SECRET not in line



def test_the_redis_password_never_shows(shared_broker: BrokerProcess,
                                        locked_redis: RedisServer) -> None:
    async def prepare() -> None:
        async with Admin(shared_broker.address) as admin:
            await admin.create_topic("cli-proc-locked")
        redis = RedisOwnershipStore(locked_redis.url)
        await redis.claim_ownership([PartitionOwnership("", "cli-proc-locked", "billing", 0,
                                                        "worker-r")])
        await redis.close()
    asyncio.run(prepare())
    result = keybus(shared_broker, "processors", "ownership", "cli-proc-locked", "billing",
                    "--redis", locked_redis.url)
    table = ok(result)
    assert "worker-r" in table and f"redis://:***@127.0.0.1:{locked_redis.port}/0" in table
    assert SECRET not in table + result.stderr
    wrong = locked_redis.url.replace(SECRET, SECRET + "x")
    line = one_line(keybus(shared_broker, "processors", "ownership", "cli-proc-locked",
                           "billing", "--redis", wrong), 1)
    assert "refused the credentials" in line and "unreachable" not in line
    assert SECRET not in line
