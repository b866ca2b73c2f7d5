"""Dispatch through a real broker and real SDK consumers: the defects of issue 9 and the
behaviours the rewrite keeps.

Goal: (0) events of 100 KB and 900 KB reach every subscription type, each delivery
under the message limit whatever the permits; (1) a Key_Shared consumer that nacks
at random (delays 1 ms, the broker's default and 300 ms) while one key keeps a long
backlog and production stops midway drains every event, each key strictly in offset
order including redeliveries, over 20 seeded runs; a refused subscribe leaves no
subscription behind; the ack timeout redelivers; window ends travel with split
deliveries; a moved slot reaches its new owner only after the old owner acked.

Method: one broker process for the module; every test uses its own topics; the
seeded runs of (1) run side by side in one event loop, each on its own topic, and
each fails with its seed in the message. Conditions are awaited by polling the
broker with bounded deadlines, never by fixed sleeps.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator

import grpc
import pytest

from sdk.admin import Admin
from sdk.consumer import Consumer, Message
from sdk.core.hashing import slot_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.errors import FailedPrecondition, InvalidArgument
from sdk.producer import Producer
from sdk.subscription_admin import SubscriptionAdmin
from tests.support.broker_process import BrokerProcess

NACK_RUNS = 20
DELIVERY_BYTES_CHECKED = 8 << 20  # the raw stream refuses a larger message


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


async def wait_for(condition: Callable[[], Awaitable[bool]], timeout_s: float = 20.0,
                   what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        assert time.monotonic() < deadline, f"{what} not met within {timeout_s}s"
        await asyncio.sleep(0.05)


async def create(address: str, topic: str, partitions: int = 1) -> None:
    async with Admin(address) as admin:
        await admin.create_topic(topic, partitions=partitions)


async def drained(address: str, topic: str, subscription: str) -> bool:
    async with SubscriptionAdmin(address) as admin:
        info = await admin.describe_subscription(topic, subscription)
    return all(p.mark_delete == p.end_offset for p in info.partitions)


# ---------------------------------------------------------------- (0) large events


def raw_deliveries(address: str, topic: str, subscription: str, events: int,
                   ) -> Iterator[int]:
    """Serialized sizes of the messages of a raw Subscribe stream that asks for every
    event at once (permits for all of them), until `events` events arrived."""
    channel = grpc.insecure_channel(address, options=[
        ("grpc.max_receive_message_length", DELIVERY_BYTES_CHECKED)])
    done = threading.Event()

    def requests() -> Iterator[pb.SubscribeRequest]:
        yield pb.SubscribeRequest(open=pb.SubscribeOpen(
            topic=topic, subscription=subscription, consumer_name="raw", type=pb.SHARED,
            initial_position=pb.StartPosition(earliest=True)))
        yield pb.SubscribeRequest(permits=pb.Permits(partition=0, count=events))
        done.wait(60)

    call = pb_grpc.KeybusStub(channel).Subscribe(requests(), timeout=60)
    seen = 0
    try:
        for response in call:
            yield response.ByteSize()
            if response.WhichOneof("body") == "delivery":
                seen += sum(r.batch.count for r in response.delivery.records)
                if seen >= events:
                    return
    finally:
        done.set()
        call.cancel()
        channel.close()


def test_large_events_reach_every_type_within_the_message_limit(
        shared_broker: BrokerProcess) -> None:
    address = shared_broker.address

    async def produce(topic: str, size: int, count: int) -> None:
        await create(address, topic)
        async with await Producer.create(address, topic) as producer:
            for start in range(0, count, 10):
                n = min(10, count - start)
                keys = list(range(start, start + n))
                await producer.send_batch(keys, [bytes([k % 251]) * size for k in keys])
            await producer.flush()

    async def consume(topic: str, kind: str, consumers: int, count: int, size: int) -> None:
        attached = [await Consumer.subscribe(address, topic, kind, type=kind,
                                             consumer_name=f"{kind}{i}",
                                             start="earliest")
                    for i in range(consumers)]
        got: list[int] = []

        async def drain(consumer: Consumer) -> None:
            while len(got) < count:
                try:
                    message = await consumer.receive(1.0)
                except TimeoutError:
                    continue
                assert message.value == bytes([message.key % 251]) * size
                got.append(message.offset)
                consumer.ack(message)

        await asyncio.wait_for(asyncio.gather(*(drain(c) for c in attached)), 60)
        assert sorted(got) == list(range(count)), f"{kind} over {size}-byte events"
        for consumer in attached:
            await consumer.close()

    async def go() -> None:
        for size, count in ((100_000, 400), (900_000, 40)):
            topic = f"large-{size}"
            await produce(topic, size, count)
            for kind, consumers in (("key_shared", 2), ("shared", 2), ("exclusive", 1),
                                    ("failover", 2)):
                await consume(topic, kind, consumers, count, size)
            sizes = await asyncio.to_thread(
                lambda topic=topic, count=count: list(raw_deliveries(address, topic, "raw",
                                                                     count)))
            assert sizes and max(sizes) <= DELIVERY_BYTES_CHECKED

    run(go())


# ---------------------------------------------------------------- (1) nacks on a long backlog


class OrderCheck:
    """One consumer's view of its keys: every delivery must be the lowest offset of its
    key that is not acknowledged yet (the application holds nothing between deliveries)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.produced: dict[int, list[int]] = defaultdict(list)  # key -> offsets, ascending
        self.first_open: dict[int, int] = defaultdict(int)  # key -> index into produced
        self.acked: set[int] = set()
        self.registered_end = 0  # offsets below are in `produced` (the producer awaits each batch)
        self.nacks = 0
        self.redeliveries = 0

    def deliver(self, message: Message) -> None:
        key, offset = int(message.key), message.offset
        offsets = self.produced[key]
        i = self.first_open[key]
        while i < len(offsets) and offsets[i] in self.acked:
            i += 1
        self.first_open[key] = i
        expected = offsets[i] if i < len(offsets) else None
        assert offset == expected, (
            f"seed {self.seed}: key {key} delivered offset {offset} (redelivery "
            f"{message.redelivery_count}) but its lowest unacknowledged offset is {expected}")
        self.redeliveries += message.redelivery_count > 0


async def nack_run(address: str, seed: int) -> OrderCheck:
    rnd = random.Random(seed)
    topic = f"nacks-{seed}"
    check = OrderCheck(seed)
    await create(address, topic)
    hot = rnd.randrange(1000)
    others = [k for k in rnd.sample(range(1000, 2000), 12)]
    producer = await Producer.create(address, topic, linger_ms=1)

    async def produce(events: int) -> None:
        sent = 0
        while sent < events:
            n = min(events - sent, rnd.randint(1, 60))
            keys = [hot if rnd.random() < 0.7 else rnd.choice(others) for _ in range(n)]
            results = await (await producer.send_batch(keys, [b"v"] * n))
            for key, result in zip(keys, results, strict=True):
                check.produced[key].append(result.offset)
            check.registered_end = results[-1].offset + 1
            sent += n
            await asyncio.sleep(rnd.uniform(0, 0.01))

    await produce(1500)  # the long backlog, before anyone consumes
    consumer = await Consumer.subscribe(address, topic, "s", type="key_shared",
                                        start="earliest",
                                        receiver_queue_size=rnd.choice([2, 10, 100, 1000]))
    production = asyncio.create_task(produce(1500))  # stops midway through the drain
    deadline = time.monotonic() + 90
    try:
        while True:
            try:
                message = await consumer.receive(0.5)
            except TimeoutError:
                if production.done() and await drained(address, topic, "s"):
                    break
                assert time.monotonic() < deadline, (
                    f"seed {seed}: stuck; {len(check.acked)} of "
                    f"{sum(map(len, check.produced.values()))} acknowledged")
                continue
            for _ in range(1000):  # delivered before the producer saw its acknowledgement
                if message.offset < check.registered_end:
                    break
                await asyncio.sleep(0.005)
            check.deliver(message)
            if rnd.random() < 0.01:
                check.nacks += 1
                consumer.nack(message, delay_ms=rnd.choice([1, 0, 300]))  # 0: broker default
            else:
                check.acked.add(message.offset)
                consumer.ack(message)
        await production
    finally:
        production.cancel()
        await consumer.close()
        await producer.close()
    assert len(check.acked) == sum(map(len, check.produced.values()))
    return check


def test_nacks_on_a_long_key_backlog_drain_in_order(shared_broker: BrokerProcess) -> None:
    base = random.randrange(1 << 30)

    async def go() -> list[OrderCheck | BaseException]:
        return await asyncio.gather(*(nack_run(shared_broker.address, base + i)
                                      for i in range(NACK_RUNS)), return_exceptions=True)

    results = asyncio.run(go())
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, f"{len(failures)} of {NACK_RUNS} runs failed (seeds {base}.." \
                         f"{base + NACK_RUNS - 1}); first: {failures[0]!r}"
    checks = [r for r in results if isinstance(r, OrderCheck)]
    assert sum(c.nacks for c in checks) > NACK_RUNS and all(c.redeliveries >= c.nacks
                                                            for c in checks)


# ---------------------------------------------------------------- refusals create nothing


def test_refused_subscribe_creates_no_subscription(shared_broker: BrokerProcess) -> None:
    address = shared_broker.address

    async def go() -> None:
        await create(address, "refused", partitions=2)
        async with await Producer.create(address, "refused") as producer:
            await producer.send_batch(list(range(20)), [b"v"] * 20)
            await producer.flush()
        with pytest.raises((FailedPrecondition, InvalidArgument), match="no hash range"):
            await Consumer.subscribe(address, "refused", "sticky", type="key_shared",
                                     mode="sticky", start="earliest")
        with pytest.raises((FailedPrecondition, InvalidArgument), match="overlap"):
            await Consumer.subscribe(address, "refused", "own-overlap", type="key_shared",
                                     mode="sticky", ranges=[(0, 10), (5, 20)])
        async with SubscriptionAdmin(address) as admin:
            assert await admin.list_subscriptions("refused") == []

    run(go())


# ---------------------------------------------------------------- behaviours kept


def test_ack_timeout_redelivers_unacknowledged_events(shared_broker: BrokerProcess) -> None:
    address = shared_broker.address

    async def go() -> None:
        await create(address, "timeouts")
        async with await Producer.create(address, "timeouts") as producer:
            await producer.send_batch(list(range(10)), [b"v"] * 10)
            await producer.flush()
        consumer = await Consumer.subscribe(address, "timeouts", "s", type="key_shared",
                                            start="earliest", ack_timeout_ms=1000)
        first: dict[int, Message] = {}
        while len(first) < 10:
            message = await consumer.receive(5)
            first[message.offset] = message
            if message.offset % 2:
                consumer.ack(message)  # the even ones are left to time out
        began = time.monotonic()
        again = []
        while len(again) < 5:
            message = await consumer.receive(10)
            assert message.offset % 2 == 0 and message.redelivery_count == 1
            again.append(message.offset)
            consumer.ack(message)
        assert sorted(again) == [0, 2, 4, 6, 8]
        assert time.monotonic() - began >= 0.5  # not before the timeout (1 s from delivery)
        await wait_for(lambda: drained(address, "timeouts", "s"), what="drained")
        await consumer.close()

    run(go())


def test_window_ends_travel_with_split_deliveries(shared_broker: BrokerProcess) -> None:
    address = shared_broker.address

    async def go() -> None:
        await create(address, "windows")
        keys = list(range(40))
        async with await Producer.create(address, "windows") as producer:
            result = await producer.send_window(
                [{"key": k, "value": b"v", "source": "t"} for k in keys], partition=0)
        last = result.offsets[-1]
        a = await Consumer.subscribe(address, "windows", "s", type="key_shared",
                                     consumer_name="a", mode="sticky", ranges="0-32767",
                                     start="earliest")
        b = await Consumer.subscribe(address, "windows", "s", type="key_shared",
                                     consumer_name="b", mode="sticky", ranges="32768-65535")
        seen: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}
        for name, consumer in (("a", a), ("b", b)):
            expected = sum(1 for k in keys if (slot_of(k) <= 32767) == (name == "a"))
            while len(seen[name]) < expected:
                batch = await consumer.receive_batch(5)
                seen[name] += [(o, batch.window_last_offset) for o in batch.offsets]
                consumer.ack_batch(batch)
        assert all(w == last for part in seen.values() for _, w in part)
        assert sorted(o for part in seen.values() for o, _ in part) == list(result.offsets)
        await a.close()
        await b.close()

    run(go())


def test_moved_slot_waits_for_its_old_owner(shared_broker: BrokerProcess) -> None:
    """Auto-split: b joins and takes every slot of these keys while a holds unacked
    events of ten of them: b gets the other ten keys at once, nothing of a's ten until a
    is gone, and then a's unacknowledged events first, every key in offset order."""
    address = shared_broker.address

    async def go() -> None:
        await create(address, "draining")
        keys = [k for k in range(400) if slot_of(k) >= 32768][:20]  # the half b will take
        async with await Producer.create(address, "draining") as producer:
            await producer.send_batch(keys * 5, [b"v"] * len(keys) * 5)
            await producer.flush()
        a = await Consumer.subscribe(address, "draining", "s", type="key_shared",
                                     mode="auto_split", consumer_name="a", start="earliest",
                                     receiver_queue_size=10)
        async with SubscriptionAdmin(address) as admin:
            async def a_holds_ten() -> bool:
                info = await admin.describe_subscription("draining", "s")
                return info.partitions[0].consumers[0].unacked == 10
            await wait_for(a_holds_ten, what="a holding offsets 0..9")
        held_keys = set(keys[:10])  # a's application takes nothing: it holds offsets 0..9
        b = await Consumer.subscribe(address, "draining", "s", type="key_shared",
                                     consumer_name="b", receiver_queue_size=1000)
        got: list[tuple[int, int]] = []
        while len(got) < 50:
            message = await b.receive(5)
            assert message.key not in held_keys, f"b got {message.key} while a holds it"
            got.append((message.offset, int(message.key)))
            b.ack(message)
        with pytest.raises(TimeoutError):
            await b.receive(0.5)
        await a.close()  # a's unacknowledged events come back, to b, first
        while len(got) < 100:
            message = await b.receive(5)
            got.append((message.offset, int(message.key)))
            b.ack(message)
        assert sorted(o for o, _ in got) == list(range(100))
        for key in keys:
            offsets = [o for o, k in got if k == key]
            assert offsets == sorted(offsets), f"key {key} out of order: {offsets}"
        await b.close()

    run(go())
