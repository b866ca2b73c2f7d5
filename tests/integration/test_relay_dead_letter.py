"""Dead letters of a subscription consumed on a relay follower.

Goal: a consumer attached on a follower nacks an event past max_redeliveries.
The event must land in the dead-letter topic where that topic takes writes,
durably, before it is acknowledged, and never in a copied log behind its
leader's back: (a) a dead-letter topic the follower copies goes to its leader
and comes back to the follower by the copy; (b) a topic the follower leads
itself takes it locally.

Method: a leader and a follower broker process with static relay configuration
(no ZooKeeper), real SDK producer and consumer; both brokers' logs read back.
Bounded waits only.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from keybus.dev_cluster import BrokerRunner, free_port
from sdk import Consumer, Producer
from sdk.core.columns import keys_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.subscription_admin import SubscriptionAdmin
from tests.support.metrics import metrics_text
from tests.support.relay_cluster import events, records, wait_for
from tests.support.wire import create_topic, stub


def broker(root: Path, name: str, config: str) -> BrokerRunner:
    path = root / f"{name}.toml"
    path.write_text(config)
    return BrokerRunner(root / name, free_port(), path)


def topics(address: str) -> list[str]:
    return [t.topic for t in stub(address).ListTopics(pb.ListTopicsRequest(), timeout=5).topics]


async def produce_seven_and_eight(leader: str) -> None:
    async with await Producer.create(leader, "t") as producer:
        await (await producer.send_batch([7, 8], [b"seven", b"eight"]))


async def poison(follower: str, leader: str, dead_letter_topic: str) -> None:
    """Events 7 and 8 in t on the leader; on the follower 8 is acked, 7 nacked past
    max_redeliveries = 1."""
    await produce_seven_and_eight(leader)
    wait_for(lambda: events(follower, "t") == 2, 15, "the follower copied t")
    async with await Consumer.subscribe(follower, "t", "s", type="shared", start="earliest",
                                        max_redeliveries=1, nack_delay_ms=10,
                                        dead_letter_topic=dead_letter_topic) as consumer:
        nacked = 0
        while nacked < 2:
            message = await consumer.receive(10)
            if message.key == 8:
                consumer.ack(message)
            else:
                consumer.nack(message)
                nacked += 1
        await consumer.flush_acks()


async def mark_delete_of(address: str) -> int:
    async with SubscriptionAdmin(address) as admin:
        info = await admin.describe_subscription("t", "s")
    return int(info.partitions[0].mark_delete)


def mark_delete(address: str) -> int:
    return asyncio.run(mark_delete_of(address))


def dead_keys(address: str, topic: str) -> list[int]:
    return [k for r in records(address, topic) for k in keys_of(r.batch)]


def copying(upstream: str) -> str:
    return (f"relay_sync_interval_ms = 200\n[replication.t]\nupstream = \"{upstream}\"\n"
            f"[replication.dlq]\nupstream = \"{upstream}\"\n")


@pytest.mark.parametrize("chained", [False, True], ids=["follower", "follower-of-a-follower"])
def test_a_copied_dead_letter_topic_is_written_on_its_leader(tmp_path: Path,
                                                             chained: bool) -> None:
    """A follower's own write to a topic it copies is refused (it does not lead it); its
    dead letters go to the leader, through a chained upstream's "not the leader" answer."""
    leader = broker(tmp_path, "leader", "[replication.t]\nacks = 1\n[replication.dlq]\nacks = 1\n")
    brokers = [leader, broker(tmp_path, "middle", copying(leader.address))]
    if chained:
        brokers.append(broker(tmp_path, "tail", copying(brokers[-1].address)))
    follower = brokers[-1]
    try:
        for b in brokers:
            b.start()
        create_topic(stub(leader.address), "t")
        create_topic(stub(leader.address), "dlq")
        wait_for(lambda: {"t", "dlq"} <= set(topics(follower.address)), 15, "topics copied")
        asyncio.run(poison(follower.address, leader.address, "dlq"))
        wait_for(lambda: mark_delete(follower.address) == 2, 15, "event 7 acked once dead-lettered")
        assert dead_keys(leader.address, "dlq") == [7]
        for b in brokers[1:]:
            wait_for(lambda b=b: dead_keys(b.address, "dlq") == [7], 15, "copied back")
        log = follower.log_path.read_text()
        assert "dead-letter of" not in log, log[-3000:]
    finally:
        for b in reversed(brokers):
            b.stop()


def failed_dead_letters(port: int) -> float:
    found = re.search(r'^keybus_dead_letter_failed_events_total\{subscription="s",topic="t"\} '
                      r"(\S+)$", metrics_text(port), re.MULTILINE)
    return float(found[1]) if found else 0.0


def test_dead_letters_wait_for_a_leader_that_is_away_and_are_counted(tmp_path: Path) -> None:
    """The leader of the copied dead-letter topic is stopped: each try fails, is counted
    (keybus_dead_letter_failed_events) and redelivers, and the consumer, which nacks
    event 7 whenever it comes, gets it again; once the leader is back the event is
    written there, once, and acknowledged."""
    metrics_port = free_port()
    leader = broker(tmp_path, "leader", "[replication.t]\nacks = 1\n[replication.dlq]\nacks = 1\n")
    follower = broker(tmp_path, "follower", f"metrics_port = {metrics_port}\n"
                      + copying(leader.address))

    async def nack_seven_until_acked() -> float:
        """Nack 7, ack 8, until 7 is acked (dead-lettered); the failed tries counted
        before the leader came back (bounded: 60 s)."""
        failed = 0.0
        async with await Consumer.subscribe(follower.address, "t", "s", type="shared",
                                            start="earliest", max_redeliveries=1,
                                            nack_delay_ms=10, dead_letter_topic="dlq") as consumer:
            deadline = asyncio.get_running_loop().time() + 60
            while await mark_delete_of(follower.address) < 2:
                assert asyncio.get_running_loop().time() < deadline, "event 7 never acked"
                if not leader.running() and (failed := failed_dead_letters(metrics_port)) >= 2:
                    assert await mark_delete_of(follower.address) < 2, "7 acked too soon"
                    leader.start()  # the next try reaches it
                try:
                    message = await consumer.receive(0.5)
                except TimeoutError:
                    continue
                if message.key == 8:
                    consumer.ack(message)
                else:
                    consumer.nack(message)
                await consumer.flush_acks()
        return failed

    try:
        leader.start()
        follower.start()
        create_topic(stub(leader.address), "t")
        create_topic(stub(leader.address), "dlq")
        wait_for(lambda: {"t", "dlq"} <= set(topics(follower.address)), 15, "topics copied")
        asyncio.run(produce_seven_and_eight(leader.address))
        wait_for(lambda: events(follower.address, "t") == 2, 15, "the follower copied t")
        leader.stop()
        assert asyncio.run(nack_seven_until_acked()) >= 2
        assert dead_keys(leader.address, "dlq") == [7]
        assert "dead-letter of 1 events of t/0/s failed, redelivering" in follower.log_path.read_text()
    finally:
        follower.stop()
        leader.stop()


def test_a_dead_letter_topic_the_follower_leads_is_written_there(tmp_path: Path) -> None:
    leader = broker(tmp_path, "leader", "[replication.t]\nacks = 1\n")
    follower = broker(tmp_path, "follower", "relay_sync_interval_ms = 200\n"
                      f'[replication.t]\nupstream = "{leader.address}"\n')
    try:
        leader.start()
        follower.start()
        create_topic(stub(leader.address), "t")
        wait_for(lambda: "t" in topics(follower.address), 15, "topic copied")
        asyncio.run(poison(follower.address, leader.address, "own-dlq"))
        wait_for(lambda: mark_delete(follower.address) == 2, 15, "event 7 acked once dead-lettered")
        assert dead_keys(follower.address, "own-dlq") == [7]
        assert "own-dlq" not in topics(leader.address)
    finally:
        follower.stop()
        leader.stop()
