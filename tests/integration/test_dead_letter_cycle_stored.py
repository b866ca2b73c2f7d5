"""A dead-letter cycle already in the data directory is reported when the broker starts.

Goal: cycles stored before the create check existed (or copied unchecked by
a relay follower) were silent: a poison event would bounce along them for
ever and nobody was told. The broker names each one at start in one WARNING
line (topics, subscriptions, what to do), once, counts them in
keybus_dead_letter_cycles, and keeps every subscription. A relay follower
that copies the subscription closing a cycle with one a consumer made on it
names that cycle once, not on every sync round.
Method: a data directory written with the real store, registry and
`SubscriptionManager.ensure` (the unchecked path a relay follower takes, as
an older broker stored them): a cycle through a default `<topic>-<sub>-DLQ`
name and a named one; then a real broker process on it, its log file and
metrics endpoint read, its subscriptions listed through the SDK. For the
relay, a leader and a follower process with static configuration and SDK
consumers on each.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from broker.config import Settings
from broker.log.rocks_store import RocksStore
from broker.subscription.manager import SubscriptionManager
from broker.topics import TopicRegistry
from keybus.dev_cluster import BrokerRunner
from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.core.pb import keybus_pb2 as pb
from sdk.subscription_admin import SubscriptionAdmin
from tests.support.broker_process import REPO, BrokerProcess, free_port
from tests.support.metrics import gauge
from tests.support.relay_cluster import wait_for

DEFAULT_CYCLE = ("'orders' -[subscription 'billing']-> 'orders-billing-DLQ' "
                 "-[subscription 'retry']-> 'orders'")
NAMED_CYCLE = "'a' -[subscription 's1']-> 'd' -[subscription 's2']-> 'a'"


def store_cycles(data_dir: Path) -> None:
    """Two cycles, written as a broker without the check would have. Run in a
    child process (`write_in_child`): RocksDB's lock is released when it exits."""
    def open_of(topic: str, name: str, dead_letter: str = "") -> pb.SubscribeOpen:
        return pb.SubscribeOpen(topic=topic, subscription=name, type=pb.SHARED,
                                max_redeliveries=3, dead_letter_topic=dead_letter)

    async def body() -> None:
        store = RocksStore(str(data_dir / "log.rocksdb"), fsync=False)  # as open_store names it
        registry = TopicRegistry(store, Settings())
        await registry.open()
        for topic in ("orders", "orders-billing-DLQ", "a", "d"):
            await registry.create(topic, pb.TopicConfig(partitions=1))
        manager = SubscriptionManager(registry, store, Settings(), {})
        await manager.open()
        for request in (open_of("orders", "billing"), open_of("orders-billing-DLQ", "retry", "orders"),
                        open_of("a", "s1", "d"), open_of("d", "s2", "a")):
            assert await manager.ensure(request, 1)
        await manager.close()
        await registry.close()
        store.close()

    asyncio.run(body())


def write_in_child(data_dir: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", "import sys; from tests.integration."
                    "test_dead_letter_cycle_stored import store_cycles as s; "
                    "from pathlib import Path; s(Path(sys.argv[1]))", str(data_dir)],
                   env=env, cwd=REPO, check=True, timeout=60)


def test_a_stored_cycle_is_named_once_at_start_and_nothing_is_lost(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    write_in_child(data_dir)
    metrics_port = free_port()
    broker = BrokerProcess(data_dir, "--no-fsync", "--metrics-port", str(metrics_port))
    broker.start()
    try:
        deadline = time.monotonic() + 10
        while gauge(metrics_port, "keybus_dead_letter_cycles") != 2:
            assert time.monotonic() < deadline, "keybus_dead_letter_cycles never reached 2"
            time.sleep(0.05)

        async def listed() -> dict[str, list[str]]:
            async with SubscriptionAdmin(broker.address) as admin:
                return {topic: [i.subscription for i in await admin.list_subscriptions(topic)]
                        for topic in ("orders", "orders-billing-DLQ", "a", "d")}

        assert asyncio.run(listed()) == {"orders": ["billing"], "orders-billing-DLQ": ["retry"],
                                         "a": ["s1"], "d": ["s2"]}
        time.sleep(1.5)  # a metrics round of the subscription manager: no second report
        lines = [line for line in broker.log_path.read_text().splitlines()
                 if "dead-letter cycle" in line]
    finally:
        broker.stop()
    assert len(lines) == 2, lines
    for cycle in (DEFAULT_CYCLE, NAMED_CYCLE):
        [line] = [line for line in lines if cycle in line]
        assert "WARNING" in line and "found at start" in line
        assert "keybus subscriptions delete TOPIC SUBSCRIPTION" in line


def test_a_follower_names_a_cycle_its_copy_closes_once(tmp_path: Path) -> None:
    """S1 on the follower's own topic 'a' dead-letters into the copied topic 't'
    (accepted: 't' has no subscription there yet); then the leader's S2 on 't'
    dead-lettering into 'a' is copied (accepted on the leader: its 'a' has none)."""
    leader_config, follower_config = tmp_path / "leader.toml", tmp_path / "follower.toml"
    leader_config.write_text("[replication.t]\nacks = 1\n")
    leader = BrokerRunner(tmp_path / "leader", free_port(), leader_config)
    metrics_port = free_port()
    follower_config.write_text(f"relay_sync_interval_ms = 100\nmetrics_port = {metrics_port}\n"
                               f'[replication.t]\nupstream = "{leader.address}"\n')
    follower = BrokerRunner(tmp_path / "follower", free_port(), follower_config)

    async def subscribe(address: str, topic: str, name: str, dead_letter: str) -> None:
        consumer = await Consumer.subscribe(address, topic, name, type="shared",
                                            max_redeliveries=2, dead_letter_topic=dead_letter)
        await consumer.close()

    async def make_cycle() -> None:
        async with Admin(leader.address) as admin:
            await admin.create_topic("t", partitions=1)
        async with Admin(follower.address) as admin:
            await admin.create_topic("a", partitions=1)
        await subscribe(follower.address, "a", "s1", "t")
        await subscribe(leader.address, "t", "s2", "a")

    try:
        leader.start()
        follower.start()
        asyncio.run(make_cycle())
        wait_for(lambda: gauge(metrics_port, "keybus_dead_letter_cycles") == 1, 15,
                 "the follower counts the cycle its copy closed")
        time.sleep(0.5)  # five more sync rounds: no second report
        lines = [line for line in follower.log_path.read_text().splitlines()
                 if "dead-letter cycle" in line]
    finally:
        follower.stop()
        leader.stop()
    assert len(lines) == 1, lines
    assert "WARNING" in lines[0] and "(closed by 's2' on 't', copied by a relay follower): " \
        "'a' -[subscription 's1']-> 't' -[subscription 's2']-> 'a';" in lines[0]
