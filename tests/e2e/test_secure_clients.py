"""The SDK, the CLI and the Spark connector over TLS with a token.

Goal: every client a user has works end to end against a broker with TLS,
authentication and permissions on, given a CA bundle and a token (or a JWT,
or the environment), and is refused with one clear message without them.
Method: one broker process with TLS, static tokens and JWT keys; the SDK
Producer/Consumer/Reader/Admin, the EventProcessor and the DatabusClient in
this process, `python -m keybus` as a subprocess, and a local[2] SparkSession
writing and reading a topic.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sdk import errors
from sdk.access_admin import AccessAdmin
from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.databus import DatabusClient, DatabusConsumerBase, DbusEvent
from sdk.processor.processor import EventProcessor
from sdk.producer import Producer
from sdk.reader import ReadBatch, Reader
from sdk.security import ClientSecurity
from sdk.stores.broker_stores import BrokerCheckpointStore
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.security import SUPERUSER, TOKENS, SecureSetup


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    return SecureSetup.make(tmp_path_factory.mktemp("tls-clients"))


@pytest.fixture(scope="module")
def secure_broker(setup: SecureSetup, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("secure-clients") / "data",
                            *setup.broker_args())
    process.start()

    async def grant() -> None:
        async with AccessAdmin(process.address, security=setup.security(SUPERUSER)) as admin:
            await admin.grant("alice", "tls.*", ["produce", "consume", "admin"])
    asyncio.run(grant())
    yield process
    process.stop()


def test_sdk_end_to_end_over_tls_with_tokens(secure_broker: BrokerProcess,
                                             setup: SecureSetup) -> None:
    alice = setup.security(token=setup.rs256("alice"))  # a JWT, RS256

    async def go() -> None:
        async with Admin(secure_broker.address, security=alice) as admin:
            await admin.create_topic("tls.sdk")
        consumer = await Consumer.subscribe(secure_broker.address, "tls.sdk", "s",
                                            type="key_shared", start="earliest",
                                            security=alice)
        async with await Producer.create(secure_broker.address, "tls.sdk",
                                         security=alice) as producer:
            for key in range(20):
                await producer.send(key, b"v%d" % key)
            await producer.flush()
        received: list[int | str] = []
        while len(received) < 20:
            message = await consumer.receive(10)
            received.append(message.event.key)
            consumer.ack(message)
        await consumer.close()
        assert sorted(received) == list(range(20))
        async with Reader(secure_broker.address, "tls.sdk", stop_offset=20,
                          security=alice) as reader:
            assert sum([batch.count async for batch in reader]) == 20
        # Without credentials, or with bob's (no grants): clear errors.
        async with Admin(secure_broker.address,
                         security=ClientSecurity(ca_file=setup.path("ca.pem"))) as admin:
            with pytest.raises(errors.Unauthenticated):
                await admin.describe_topic("tls.sdk")
        with pytest.raises(errors.PermissionDenied, match="'bob' lacks the produce or"):
            await Producer.create(secure_broker.address, "tls.sdk",
                                  security=setup.security("bob"))
    asyncio.run(go())


def keybus(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    for name in ("KEYBUS_TOKEN", "KEYBUS_TLS_CA", "KEYBUS_BROKER"):
        if name not in (env or {}):
            full_env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "keybus", *args], capture_output=True,
                          text=True, timeout=60, env=full_env, cwd=REPO)


def test_cli_end_to_end_over_tls_with_token(secure_broker: BrokerProcess,
                                            setup: SecureSetup) -> None:
    tls = ["--broker", secure_broker.address, "--tls-ca", setup.path("ca.pem")]
    alice = [*tls, "--token", TOKENS["alice"]]
    created = keybus("topics", "create", "tls.cli", *alice)
    assert created.returncode == 0, created.stderr
    produced = keybus("produce", "tls.cli", "--key", "7", "--value", "hi", *alice)
    assert produced.returncode == 0, produced.stderr
    # The environment works as well as flags (the token never on the command line).
    env = {"KEYBUS_BROKER": secure_broker.address, "KEYBUS_TLS_CA": setup.path("ca.pem"),
           "KEYBUS_TOKEN": setup.hs256("alice")}
    read = keybus("read", "tls.cli", "--json", env=env)
    assert read.returncode == 0, read.stderr
    assert [(e["key"], e["value"]) for e in map(json.loads, read.stdout.splitlines())] == [(7, "hi")]
    whoami = keybus("acl", "whoami", "--json", env=env)
    assert json.loads(whoami.stdout) == {"principal": "alice", "superuser": False, "tls": True}
    granted = keybus("acl", "grant", "bob", "tls.cli", "consume", *tls, "--token", TOKENS[SUPERUSER])
    assert granted.returncode == 0, granted.stderr
    listed = json.loads(keybus("acl", "list", "--principal", "bob", "--json", *tls,
                               "--token", TOKENS[SUPERUSER]).stdout)
    assert listed["enforced"] and {"principal": "bob", "topic": "tls.cli",
                                   "permission": "consume"} in listed["grants"]
    for args, expected in (
            ((*tls, "--token", TOKENS["bob"]), "'bob' lacks the produce permission"),
            (tls, "no credentials"),
            # plain text to a TLS port: the probable cause and the fix (sdk/core/connect_hints.py)
            (("--broker", secure_broker.address, "--token", TOKENS["alice"]),
             "closed the connection during the handshake: is it TLS? pass its CA")):
        refused = keybus("produce", "tls.cli", "--key", "1", "--value", "x", *args)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert refused.stderr.startswith("keybus: error:") and expected in refused.stderr, \
            refused.stderr


@pytest.mark.spark
def test_spark_write_and_read_over_tls_with_token(spark: Any, secure_broker: BrokerProcess,
                                                  setup: SecureSetup, tmp_path: Any) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKENS["alice"])

    async def create() -> None:
        async with Admin(secure_broker.address, security=setup.security("alice")) as admin:
            await admin.create_topic("tls.spark", partitions=2)
    asyncio.run(create())
    options = {"broker": secure_broker.address, "topic": "tls.spark",
               "tlsCaFile": setup.path("ca.pem"), "tokenFile": str(token_file)}
    rows = [(i, b"value-%d" % i) for i in range(100)]
    spark.createDataFrame(rows, "key_long long, value binary").write.format("keybus") \
        .options(**options).mode("append").save()
    read = spark.read.format("keybus").options(**options).load()
    assert sorted((r.key_long, bytes(r.value)) for r in read.collect()) == rows
    with pytest.raises(Exception, match=r"UNAUTHENTICATED|no credentials"):
        spark.read.format("keybus").option("broker", secure_broker.address) \
            .option("topic", "tls.spark").option("tlsCaFile", setup.path("ca.pem")).load().collect()


def alice_token() -> str:
    """The tokenProvider the Spark test names: imported on the driver and each executor."""
    return TOKENS["alice"]


@pytest.mark.spark
def test_spark_takes_a_token_provider_by_name_and_refuses_a_callable(
        spark: Any, secure_broker: BrokerProcess, setup: SecureSetup) -> None:
    """Before: tokenProvider was an unknown option, and .option('token', f) sent the
    function's repr as the token (the broker answered "not known to this broker")."""
    async def create() -> None:
        async with Admin(secure_broker.address, security=setup.security("alice")) as admin:
            await admin.create_topic("tls.spark-provider", partitions=2)
    asyncio.run(create())
    options = {"broker": secure_broker.address, "topic": "tls.spark-provider",
               "tlsCaFile": setup.path("ca.pem"),
               "tokenProvider": f"{__name__}:alice_token"}
    rows = [(i, b"value-%d" % i) for i in range(20)]
    spark.createDataFrame(rows, "key_long long, value binary").write.format("keybus") \
        .options(**options).mode("append").save()
    read = spark.read.format("keybus").options(**options).load()
    assert sorted((r.key_long, bytes(r.value)) for r in read.collect()) == rows
    with pytest.raises(Exception, match="is the text of a Python callable") as refused:
        spark.read.format("keybus").option("broker", secure_broker.address) \
            .option("topic", "tls.spark-provider").option("tlsCaFile", setup.path("ca.pem")) \
            .option("token", lambda: TOKENS["alice"]).load()
    assert "a module-level function named package.module:function" in str(refused.value)
    assert "or tokenFile" in str(refused.value)


# ---------------------------------------------------------------- the callback clients

WAIT_S = 30.0
EVENTS = 30

# EventProcessor and DatabusClient take security= too, and use it on every channel
# they open: reads, broker-held ownership and checkpoint stores, Key_Shared streams.

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
        await _fill(secure_broker.address, "tls.processor", alice)
        seen: list[int | str] = []

        async def on_event(context: Any, batch: ReadBatch) -> None:
            seen.extend(event.key for event in batch.events())
            await context.update_checkpoint(batch)

        processor = EventProcessor(secure_broker.address, "tls.processor", "g",
                                   on_event=on_event, load_balancing_interval_ms=500,
                                   security=alice)
        async with processor:
            await _wait_until(lambda: len(seen) >= EVENTS)
        assert sorted(seen) == list(range(EVENTS))
        async with BrokerCheckpointStore(secure_broker.address, security=alice) as store:
            checkpoints = await store.list_checkpoints("", "tls.processor", "g")
        assert sum(c.offset + 1 for c in checkpoints) == EVENTS  # stored in the broker

    asyncio.run(asyncio.wait_for(go(), WAIT_S * 3))


def test_event_processor_without_security_is_refused(secure_broker: BrokerProcess) -> None:
    errors: list[BaseException] = []

    async def go() -> None:
        processor = EventProcessor(secure_broker.address, "tls.processor", "g2",
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
        await _fill(secure_broker.address, "tls.databus", alice)
        logged, shared = Collect(), Collect()
        checkpoints = BrokerCheckpointStore(secure_broker.address, security=alice)
        client = DatabusClient(secure_broker.address, checkpoint_store=checkpoints,
                               security=alice)
        client.register(logged, topic="tls.databus", name="billing")
        client.register_shared(shared, topic="tls.databus", subscription="shipping")
        async with client:
            await _wait_until(lambda: len(logged.keys) >= EVENTS and len(shared.keys) >= EVENTS)
        await checkpoints.close()
        assert sorted(logged.keys) == list(range(EVENTS))
        assert sorted(shared.keys) == list(range(EVENTS))

    asyncio.run(asyncio.wait_for(go(), WAIT_S * 3))


def test_cluster_status_says_refused_not_unreachable(secure_broker: BrokerProcess,
                                                     setup: SecureSetup) -> None:
    """A broker that answered no (bob may not see every topic's cluster state) is
    "refused" with its reason; only one that did not answer is "unreachable"."""
    tls = ["--broker", secure_broker.address, "--tls-ca", setup.path("ca.pem")]
    shown = keybus("cluster", "status", "--json", *tls, "--token", TOKENS["bob"])
    assert shown.returncode == 1 and "Traceback" not in shown.stderr, shown.stderr
    (broker,) = json.loads(shown.stdout)["brokers"]
    assert broker["refused"] is True and "lacks" in broker["error"], broker
    table = keybus("cluster", "status", "--wide", *tls, "--token", TOKENS["bob"])
    assert "refused" in table.stdout and "unreachable" not in table.stdout, table.stdout
