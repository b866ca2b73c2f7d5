"""Subscriptions end to end: a real broker process, real SDK consumers.

Goal: each subscription type behaves as DESIGN.md says; every refusal comes
back as a clear status; cursors survive SIGKILL (only unacknowledged events
come again); range-change and active-change callbacks fire; a filtered
subscription receives only passing events and its backlog ignores the rest.
Method: one broker for the module (distinct topics per test), one of its
own for the SIGKILL test; conditions are awaited by polling the broker's
DescribeSubscription, never by fixed sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest

from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.core.hashing import slot_of
from sdk.core.model import HashRange
from sdk.core.pb import keybus_pb2 as pb
from sdk.errors import FailedPrecondition, InvalidArgument, KeybusError, TopicNotFound
from sdk.producer import Producer
from sdk.subscription_admin import SubscriptionAdmin
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.wire import stub


async def topic_with(address: str, topic: str, keys: list[int], partitions: int = 1) -> None:
    async with Admin(address) as admin:
        await admin.create_topic(topic, partitions=partitions)
    producer = await Producer.create(address, topic)
    for key in keys:
        await producer.send(key, f"v{key}".encode(), partition=0 if partitions == 1 else None)
    await producer.close()


async def wait_for(condition: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def drain(consumer: Consumer, idle_s: float = 0.5, ack: bool = True) -> list[tuple[int, int, int | str]]:
    """(partition, offset, key) of what arrives until idle_s passes without an event."""
    got = []
    while True:
        try:
            message = await consumer.receive(idle_s)
        except TimeoutError:
            return got
        got.append((message.partition, message.offset, message.key))
        if ack:
            consumer.ack(message)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


# ---------------------------------------------------------------- refusals


def test_refusals_have_clear_statuses(shared_broker: BrokerProcess) -> None:
    address = shared_broker.address

    async def go() -> None:
        await topic_with(address, "refusals", list(range(10)))
        with pytest.raises(TopicNotFound, match="'nope' does not exist"):
            await Consumer.subscribe(address, "nope", "s")
        first = await Consumer.subscribe(address, "refusals", "ex", consumer_name="first")
        with pytest.raises(FailedPrecondition, match="Exclusive and consumer 'first' is attached"):
            await Consumer.subscribe(address, "refusals", "ex", consumer_name="second")
        with pytest.raises(FailedPrecondition, match="is exclusive; consumer 'x' asked for shared"):
            await Consumer.subscribe(address, "refusals", "ex", type="shared", consumer_name="x")
        await first.close()
        a = await Consumer.subscribe(address, "refusals", "st", type="key_shared", mode="sticky",
                                     ranges="0-1000", consumer_name="a")
        with pytest.raises(FailedPrecondition, match="overlaps range 0-1000 of consumer 'a'"):
            await Consumer.subscribe(address, "refusals", "st", type="key_shared", mode="sticky",
                                     ranges="900-2000", consumer_name="b")
        with pytest.raises(InvalidArgument, match="ack_timeout_ms=5 is out of range"):
            await Consumer.subscribe(address, "refusals", "lim", ack_timeout_ms=5)
        with pytest.raises(InvalidArgument, match=r"look_ahead_max=.* is out of range"):
            await Consumer.subscribe(address, "refusals", "lim", type="key_shared",
                                     look_ahead_max=10**9)
        await a.close()

    run(go())
    # permits out of range: speak the wire directly (the SDK never sends these)
    client = stub(address)
    for count in (0, 10**9):
        requests = iter([
            pb.SubscribeRequest(open=pb.SubscribeOpen(topic="refusals", subscription="raw",
                                                      consumer_name=f"raw{count}")),
            pb.SubscribeRequest(permits=pb.Permits(partition=0, count=count))])
        with pytest.raises(grpc.RpcError) as caught:
            for _ in client.Subscribe(requests, timeout=10):
                pass
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"count={count}" in caught.value.details()
    requests = iter([pb.SubscribeRequest(permits=pb.Permits(partition=0, count=1))])
    with pytest.raises(grpc.RpcError) as caught:
        list(client.Subscribe(requests, timeout=10))
    assert "first message of a Subscribe stream must be `open`" in caught.value.details()


# ---------------------------------------------------------------- types


def test_exclusive_nack_keeps_key_order_and_counts_redeliveries(shared_broker: BrokerProcess) -> None:
    async def go() -> None:
        keys = [1, 2, 2, 2, 1, 1]
        await topic_with(shared_broker.address, "nacks", keys)
        consumer = await Consumer.subscribe(shared_broker.address, "nacks", "s",
                                            start="earliest", receiver_queue_size=2)
        first = await consumer.receive(5)
        assert (first.offset, first.key, first.redelivery_count) == (0, 1, 0)
        consumer.nack(first, delay_ms=300)
        seen = []
        while len(seen) < 6:
            message = await consumer.receive(5)
            seen.append((message.offset, message.redelivery_count))
            consumer.ack(message)
        # key 1 (offsets 0, 4, 5) waits for its retried event; key 2 flows meanwhile
        assert [o for o, _ in seen if o in (0, 4, 5)] == [0, 4, 5]
        assert seen.index((0, 1)) > seen.index((3, 0))
        await consumer.close()

    run(go())


def test_shared_spreads_events_over_consumers(shared_broker: BrokerProcess) -> None:
    async def go() -> None:
        await topic_with(shared_broker.address, "shared", list(range(400)))
        a = await Consumer.subscribe(shared_broker.address, "shared", "s", type="shared",
                                     start="earliest", receiver_queue_size=20)
        b = await Consumer.subscribe(shared_broker.address, "shared", "s", type="shared",
                                     receiver_queue_size=20)
        got_a, got_b = await asyncio.gather(drain(a), drain(b))
        assert got_a and got_b
        assert sorted(o for _, o, _ in got_a + got_b) == list(range(400))
        await a.close()
        await b.close()

    run(go())


def test_failover_tells_consumers_and_moves_unacked(shared_broker: BrokerProcess) -> None:
    async def go() -> None:
        await topic_with(shared_broker.address, "failover", list(range(50)))
        changes: list[tuple[str, int, bool]] = []
        standby = await Consumer.subscribe(
            shared_broker.address, "failover", "s", type="failover", priority=1,
            consumer_name="b", start="earliest",
            on_active_change=lambda p, active: changes.append(("b", p, active)))
        main = await Consumer.subscribe(
            shared_broker.address, "failover", "s", type="failover", priority=0,
            consumer_name="a", on_active_change=lambda p, active: changes.append(("a", p, active)))
        await wait_for(lambda: _true(main.active.get(0) is True))
        assert standby.active == {0: False}
        taken = await main.receive(5)  # not acknowledged: goes to b when a leaves
        await main.close()
        await wait_for(lambda: _true(standby.active.get(0) is True))
        offsets = [o for _, o, _ in await drain(standby)]
        assert taken.offset in offsets
        assert sorted(set(offsets)) == list(range(50))
        assert ("b", 0, True) in changes and ("a", 0, True) in changes
        await standby.close()

    run(go())


async def _true(value: bool) -> bool:
    return value


def test_key_shared_range_change_callbacks_fire(shared_broker: BrokerProcess) -> None:
    async def go() -> None:
        await topic_with(shared_broker.address, "ranges", list(range(200)))
        seen: dict[str, list[list[HashRange]]] = {"a": [], "b": []}
        a = await Consumer.subscribe(shared_broker.address, "ranges", "s", type="key_shared",
                                     mode="auto_split", consumer_name="a", start="earliest",
                                     on_range_change=lambda p, r: seen["a"].append(r))
        await wait_for(lambda: _true(seen["a"] == [[HashRange(0, 65535)]]))
        b = await Consumer.subscribe(shared_broker.address, "ranges", "s", type="key_shared",
                                     consumer_name="b",
                                     on_range_change=lambda p, r: seen["b"].append(r))
        await wait_for(lambda: _true(len(seen["a"]) == 2 and len(seen["b"]) == 1))
        assert seen["a"][-1] == [HashRange(0, 32767)]
        assert seen["b"][-1] == [HashRange(32768, 65535)]
        got_a, got_b = await asyncio.gather(drain(a), drain(b))
        assert sorted(o for _, o, _ in got_a + got_b) == list(range(200))
        await b.close()
        await wait_for(lambda: _true(len(seen["a"]) == 3))
        assert seen["a"][-1] == [HashRange(0, 65535)]
        await a.close()

    run(go())


def test_a_consumer_naming_no_mode_takes_the_subscriptions_or_the_brokers(
        shared_broker: BrokerProcess) -> None:
    """No mode named: a new Key_Shared subscription gets the broker's default
    (consistent hashing); an existing one is joined in whatever mode it has (here
    auto-split, so the second consumer takes the upper half); a named mode that differs
    is refused; joining a sticky subscription without ranges is refused, not attached."""
    address = shared_broker.address

    async def mode_of(subscription: str) -> int:
        async with SubscriptionAdmin(address) as admin:
            info = await admin.describe_subscription("modes", subscription)
        return int(info.key_shared_mode)

    async def go() -> None:
        await topic_with(address, "modes", list(range(20)))
        fresh = await Consumer.subscribe(address, "modes", "new", type="key_shared",
                                         consumer_name="a")
        assert await mode_of("new") == pb.CONSISTENT
        await fresh.close()
        seen: list[list[HashRange]] = []
        a = await Consumer.subscribe(address, "modes", "split", type="key_shared",
                                     mode="auto_split", consumer_name="a")
        b = await Consumer.subscribe(address, "modes", "split", type="key_shared",
                                     consumer_name="b",
                                     on_range_change=lambda p, r: seen.append(r))
        await wait_for(lambda: _true(seen == [[HashRange(32768, 65535)]]))
        assert await mode_of("split") == pb.AUTO_SPLIT
        with pytest.raises(FailedPrecondition, match=r"is key_shared \(mode auto_split\); "
                                                     r"consumer 'c' asked for key_shared "
                                                     r"\(mode consistent\)"):
            await Consumer.subscribe(address, "modes", "split", type="key_shared",
                                     mode="consistent", consumer_name="c")
        sticky = await Consumer.subscribe(address, "modes", "sticky", type="key_shared",
                                          mode="sticky", ranges="0-100", consumer_name="a")
        with pytest.raises(InvalidArgument, match="declared no hash range; sticky mode"):
            await Consumer.subscribe(address, "modes", "sticky", type="key_shared",
                                     consumer_name="b")
        for consumer in (a, b, sticky):
            await consumer.close()

    run(go())


def test_filtered_subscription_and_its_backlog(shared_broker: BrokerProcess) -> None:
    async def go() -> None:
        await topic_with(shared_broker.address, "filtered", list(range(100)))
        consumer = await Consumer.subscribe(shared_broker.address, "filtered", "even",
                                            key_filter="mod:2:[0]", start="earliest")
        got = await drain(consumer, ack=False)
        assert [k for _, _, k in got] == list(range(0, 100, 2))
        async with SubscriptionAdmin(shared_broker.address) as admin:
            info = await admin.describe_subscription("filtered", "even")
            assert info.partitions[0].backlog == 50  # the 50 odd keys are not backlog
            assert info.partitions[0].unacked == 50
            for _, offset, _ in got:
                consumer.ack_offsets(0, [offset])

            async def settled() -> bool:
                info = await admin.describe_subscription("filtered", "even")
                return info.partitions[0].backlog == 0 and info.partitions[0].mark_delete == 100

            await wait_for(settled)
        await consumer.close()

    run(go())


def test_dead_letter_after_max_redeliveries(shared_broker: BrokerProcess) -> None:
    async def go() -> None:
        await topic_with(shared_broker.address, "poison", [7, 8])
        consumer = await Consumer.subscribe(shared_broker.address, "poison", "s",
                                            type="shared", start="earliest",
                                            max_redeliveries=2, nack_delay_ms=10)
        counts = []
        while True:
            message = await consumer.receive(5)
            if message.key == 8:
                consumer.ack(message)
                continue
            counts.append(message.redelivery_count)
            consumer.nack(message)
            if len(counts) == 3:
                break
        assert counts == [0, 1, 2]
        async with Admin(shared_broker.address) as admin:
            async def dead_lettered() -> bool:
                names = [t.topic for t in await admin.list_topics()]
                if "poison-s-DLQ" not in names:
                    return False
                info = await admin.describe_topic("poison-s-DLQ")
                return info.partitions[0].end_offset == 1
            await wait_for(dead_lettered)
        async with SubscriptionAdmin(shared_broker.address) as sub_admin:
            async def acked() -> bool:
                info = await sub_admin.describe_subscription("poison", "s")
                return info.partitions[0].mark_delete == 2
            await wait_for(acked)
        await consumer.close()

    run(go())


def test_a_dead_letter_topic_that_loops_or_cannot_be_named_is_refused(
        shared_broker: BrokerProcess) -> None:
    """A subscription dead-lettering into its own topic was accepted, and one poison
    event nacked for 8 s grew the topic to 1,961 events; a long topic and subscription
    got "topic name 'TTT…-SSS…-DLQ' is invalid", a topic the user never named."""
    async def go() -> None:
        address = shared_broker.address
        await topic_with(address, "dlq-loop", [1])
        with pytest.raises(InvalidArgument, match="dead_letter_topic='dlq-loop' is the "
                                                  "subscribed topic"):
            await Consumer.subscribe(address, "dlq-loop", "s", type="shared",
                                     max_redeliveries=1, dead_letter_topic="dlq-loop")
        long_topic = "t" * 200
        await topic_with(address, long_topic, [1])
        with pytest.raises(InvalidArgument, match="default dead-letter topic name "
                                                  "<topic>-<subscription>-DLQ would be 305"):
            await Consumer.subscribe(address, long_topic, "s" * 100, max_redeliveries=1)
        async with SubscriptionAdmin(address) as admin:
            assert await admin.list_subscriptions("dlq-loop") == []
            assert await admin.list_subscriptions(long_topic) == []

    run(go())


def test_seek_delete_and_topic_deletion(shared_broker: BrokerProcess) -> None:
    async def go() -> None:
        address = shared_broker.address
        await topic_with(address, "admin", list(range(20)))
        consumer = await Consumer.subscribe(address, "admin", "s", start="earliest")
        assert len(await drain(consumer)) == 20
        async with SubscriptionAdmin(address) as admin:
            info = await admin.seek("admin", "s", 15)
            assert info.partitions[0].mark_delete == 15
            assert [o for _, o, _ in await drain(consumer)] == [15, 16, 17, 18, 19]
            with pytest.raises(FailedPrecondition, match="has 1 attached consumer"):
                await admin.delete_subscription("admin", "s")
            await consumer.close()
            await admin.delete_subscription("admin", "s")
            assert await admin.list_subscriptions("admin") == []
            lasting = await Consumer.subscribe(address, "admin", "t")
            async with Admin(address) as topics:
                await topics.delete_topic("admin")
            with pytest.raises(KeybusError, match="was deleted"):
                await lasting.receive(5)
            await lasting.close()
            await topic_with(address, "admin", [1])
            assert await admin.list_subscriptions("admin") == []

    run(go())


def test_acked_ranges_counts_the_individually_acked_ranges(shared_broker: BrokerProcess) -> None:
    """The proto's meaning: ranges acked above mark_delete (was: the unacked runs, 1 and 3)."""
    async def go() -> None:
        address = shared_broker.address
        await topic_with(address, "acked-ranges", list(range(20)))
        consumer = await Consumer.subscribe(address, "acked-ranges", "s", type="shared",
                                            start="earliest")
        messages = [await consumer.receive(5) for _ in range(20)]
        async with SubscriptionAdmin(address) as admin:
            async def partition() -> pb.SubscriptionPartitionInfo:
                return (await admin.describe_subscription("acked-ranges", "s")).partitions[0]

            async def persisted(mark_delete: int, acked_ranges: int) -> bool:
                p = await partition()
                return (p.persisted_mark_delete, p.acked_ranges) == (mark_delete, acked_ranges)

            async def all_sent() -> bool:
                return (await partition()).unacked == 20
            await wait_for(all_sent)
            assert (await partition()).acked_ranges == 0
            for message in (messages[5], messages[10]):
                consumer.ack(message)
            await wait_for(lambda: persisted(0, 2))
            for message in messages[:5] + messages[6:10] + messages[11:]:
                consumer.ack(message)
            await wait_for(lambda: persisted(20, 0))
        await consumer.close()

    run(go())


def test_cli_lists_and_describes_with_range_bars(shared_broker: BrokerProcess) -> None:
    async def setup() -> None:
        await topic_with(shared_broker.address, "cli-subs", list(range(30)))

    run(setup())
    env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=shared_broker.address)

    def keybus(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "keybus", *args], capture_output=True,
                              text=True, timeout=60, env=env, cwd=REPO)

    consumed = keybus("consume", "cli-subs", "-s", "ks", "--type", "key_shared", "--mode",
                      "sticky", "--ranges", "0-32767", "--from", "earliest", "--timeout", "1",
                      "--json")
    assert consumed.returncode == 0, consumed.stderr
    lines = [json.loads(line) for line in consumed.stdout.splitlines()]
    events = [line for line in lines if "offset" in line]
    assert events and all(slot_of(e["key"]) <= 32767 for e in events)
    assert {"range_change": {"partition": 0, "ranges": "0-32767"}} in lines
    listed = keybus("subscriptions", "list", "cli-subs", "--json")
    assert json.loads(listed.stdout)[0]["subscription"] == "ks"
    described = keybus("subscriptions", "describe", "cli-subs", "ks")
    assert described.returncode == 0 and "no_owner" not in described.stderr
    refused = keybus("consume", "cli-subs", "-s", "ks", "--type", "shared", "--timeout", "1")
    assert refused.returncode == 1
    assert "is key_shared (mode sticky); consumer" in refused.stderr
    assert "Traceback" not in refused.stderr


# ---------------------------------------------------------------- durability


def test_cursor_survives_sigkill(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    acked = set(range(600)) | set(range(600, 800, 2))

    async def before() -> None:
        await topic_with(broker.address, "durable", list(range(1000)))
        consumer = await Consumer.subscribe(broker.address, "durable", "s", type="shared",
                                            start="earliest")
        got = []
        while len(got) < 1000:
            got.append((await consumer.receive(5)).offset)
        consumer.ack_offsets(0, sorted(acked - set(range(600))))
        await consumer.flush_acks()
        consumer.ack_offsets(0, range(600))
        await consumer.flush_acks()
        async with SubscriptionAdmin(broker.address) as admin:
            async def persisted() -> bool:
                info = await admin.describe_subscription("durable", "s")
                return info.partitions[0].persisted_mark_delete == 601
            await wait_for(persisted)

    async def after() -> list[int]:
        consumer = await Consumer.subscribe(broker.address, "durable", "s", type="shared")
        offsets = [o for _, o, _ in await drain(consumer, idle_s=1.0, ack=False)]
        await consumer.close()
        return offsets

    try:
        run(before())
        broker.kill()
        broker.start()
        again: list[int] = []

        async def collect() -> None:
            again.extend(await after())

        run(collect())
        assert sorted(again) == sorted(set(range(1000)) - acked)
    finally:
        broker.stop()
