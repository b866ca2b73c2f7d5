"""Key_Shared under churn: real broker process, real SDK consumers, seeded.

Goal: while events over 1,000 keys flow, consumers join, leave, crash and
nack at random, and still: no acknowledged event is lost (at the end every
offset of every partition is acknowledged); each key's events reach the
application in offset order, redeliveries included, across consumers; at
most one consumer holds unacknowledged events of a key at any moment; after
every membership change every slot has exactly one owner.

Method: one asyncio process runs a producer (columnar batches), up to six
consumers (each its own gRPC channel) and a churn script driven by a seeded
random generator. A consumer "holds" an event from the moment the
application receives it until it acks or nacks it, or leaves or crashes (a
crash drops the channel without a goodbye, so the broker learns of it only
from the broken stream). The checks run at every receipt; the seed is
printed on failure (replay with KEYBUS_CHURN_SEED=<seed>; the scheduling of
a real broker is not replayable, so a replay reproduces the script, not
every interleaving). KEYBUS_CHURN_EVENTS sets the event count (100,000).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import defaultdict
from pathlib import Path

from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.core.hashing import SLOT_COUNT, slot_of
from sdk.producer import Producer
from sdk.subscription_admin import SubscriptionAdmin
from tests.support.broker_process import BrokerProcess

TOPIC = "churn"
KEYS = 1000
PARTITIONS = 2
CONSUMERS_MAX = 6
POOL = [f"c{i}" for i in range(12)]


class Checker:
    """The application-side view: who holds what, what was acked, per-key offsets."""

    def __init__(self) -> None:
        self.key_offsets: dict[int, list[int]] = defaultdict(list)  # key -> offsets (one partition)
        self.key_first_open: dict[int, int] = defaultdict(int)  # index into key_offsets
        self.acked: set[tuple[int, int]] = set()
        self.holders: dict[int, dict[str, int]] = defaultdict(dict)  # key -> consumer -> count
        self.deliveries = 0
        self.redeliveries = 0
        self.failure: BaseException | None = None
        self.history: dict[tuple[int, int], list[str]] = defaultdict(list)  # for failure notes

    def produced(self, keys: list[int], results: list[tuple[int, int]]) -> None:
        for key, (_, offset) in zip(keys, results, strict=True):
            self.key_offsets[key].append(offset)

    def receive(self, name: str, held: dict[tuple[int, int], int], partition: int, offset: int,
                key: int, redelivery: int) -> None:
        others = [n for n in self.holders[key] if n != name]
        assert not others, (f"key {key}: {partition}:{offset} reached {name} while {others} "
                            f"hold unacked events of it")
        offsets = self.key_offsets[key]
        i = self.key_first_open[key]
        while i < len(offsets) and (partition, offsets[i]) in self.acked:
            i += 1
        self.key_first_open[key] = i
        for earlier in offsets[i:]:
            if earlier >= offset:
                break
            assert (partition, earlier) in held, (
                f"key {key}: {partition}:{offset} reached {name} before {partition}:{earlier} "
                f"was acknowledged; history of {earlier}: {self.history[partition, earlier]}")
        held[partition, offset] = key
        self.history[partition, offset].append(f"{name} got (count {redelivery})")
        self.holders[key][name] = self.holders[key].get(name, 0) + 1
        self.deliveries += 1
        self.redeliveries += bool(redelivery)

    def release(self, name: str, key: int) -> None:
        count = self.holders[key][name] - 1
        if count:
            self.holders[key][name] = count
        else:
            del self.holders[key][name]


class Worker:
    """One consumer and its processing loop."""

    def __init__(self, name: str, consumer: Consumer, checker: Checker, rnd: random.Random,
                 nack_probability: float) -> None:
        self.name = name
        self.consumer = consumer
        self.checker = checker
        self.rnd = random.Random(rnd.random())
        self.nack_probability = nack_probability
        self.held: dict[tuple[int, int], int] = {}
        self.stall_s = 0.0
        self.task = asyncio.create_task(self.run())

    async def run(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # surfaced by the script's next check
            self.checker.failure = self.checker.failure or error

    async def _run(self) -> None:
        checker = self.checker
        while True:
            try:
                batch = await self.consumer.receive_batch(0.2)
            except TimeoutError:
                continue
            partition = batch.partition
            keys = batch.keys()
            counts = batch.redelivery_counts or [0] * batch.count
            for offset, key, count in zip(batch.offsets, keys, counts, strict=True):
                checker.receive(self.name, self.held, partition, offset, int(key), count)
            if self.stall_s:
                await asyncio.sleep(self.stall_s)
            for offset, key in zip(batch.offsets, keys, strict=True):
                if (partition, offset) not in self.held:
                    continue  # an earlier nack in this batch gave it back already
                if self.rnd.random() < self.nack_probability:
                    self.nack_key_from(partition, offset, int(key))
                else:
                    del self.held[partition, offset]
                    checker.acked.add((partition, offset))
                    checker.release(self.name, int(key))
                    self.consumer.ack_offsets(partition, (offset,))

    def nack_key_from(self, partition: int, offset: int, key: int) -> None:
        """Nack this event and every later one of its key this consumer holds (the
        application gives up on the key for now, so the key's order is kept)."""
        given = sorted(o for (p, o), k in self.held.items() if p == partition and k == key
                       and o >= offset)
        for o in given:
            del self.held[partition, o]
            self.checker.release(self.name, key)
            self.checker.history[partition, o].append(f"{self.name} nacked")
        self.consumer.nack_offsets(partition, given, self.rnd.randint(1, 100),
                                   [slot_of(key)] * len(given))

    def forget_held(self) -> None:
        for (p, o), key in self.held.items():
            self.checker.release(self.name, key)
            self.checker.history[p, o].append(f"{self.name} left holding it")
        self.held.clear()

    async def leave(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.forget_held()
        await self.consumer.close()

    async def crash(self) -> None:
        """Drop the connection with no goodbye: pending acks are lost, held events come back."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.forget_held()
        consumer = self.consumer
        consumer._closed = True
        for task in consumer._tasks:
            task.cancel()
        await asyncio.gather(*consumer._tasks, return_exceptions=True)
        await consumer._conn.channel.close(grace=None)


async def check_owners(admin: SubscriptionAdmin, expected: set[str]) -> None:
    """Every slot of every partition has exactly one owner among `expected`."""
    deadline = time.monotonic() + 10
    while True:
        info = await admin.describe_subscription(TOPIC, "s")
        names = {c.name for p in info.partitions for c in p.consumers}
        if names == expected:
            break
        assert time.monotonic() < deadline, f"consumers {names} never became {expected}"
        await asyncio.sleep(0.02)
    for p in info.partitions:
        covered = bytearray(SLOT_COUNT)
        for c in p.consumers:
            for r in c.ranges:
                for slot in range(r.slot_first, r.slot_last + 1):
                    covered[slot] += 1
        if expected:
            assert covered == bytearray([1]) * SLOT_COUNT, f"partition {p.partition}: slots " \
                f"owned {min(covered)}..{max(covered)} times"


async def scenario(address: str, seed: int, events: int, mode: str) -> Checker:
    rnd = random.Random(seed)
    checker = Checker()
    async with Admin(address) as admin:
        await admin.create_topic(TOPIC, partitions=PARTITIONS)
    producer = await Producer.create(address, TOPIC, linger_ms=2)
    workers: dict[str, Worker] = {}
    sub_admin = SubscriptionAdmin(address)

    async def join() -> None:
        name = rnd.choice([n for n in POOL if n not in workers])
        consumer = await Consumer.subscribe(address, TOPIC, "s", type="key_shared", mode=mode,
                                            consumer_name=name, start="earliest",
                                            receiver_queue_size=rnd.choice([20, 100, 500]))
        workers[name] = Worker(name, consumer, checker, rnd, nack_probability=0.01)

    async def produce() -> None:
        sent = 0
        while sent < events:
            n = min(events - sent, rnd.randint(200, 2000))
            keys = [rnd.randrange(KEYS) for _ in range(n)]
            future = await producer.send_batch(keys, [b"x" * 20] * n)
            results = await future
            checker.produced(keys, [(r.partition, r.offset) for r in results])
            sent += n
            await asyncio.sleep(rnd.uniform(0, 0.02))

    await join()
    production = asyncio.create_task(produce())
    changes = 0
    while not production.done() or changes < 20:
        await asyncio.sleep(rnd.uniform(0.05, 0.25))
        if checker.failure is not None:
            raise checker.failure
        action = rnd.random()
        if action < 0.3 and len(workers) < CONSUMERS_MAX:
            await join()
        elif action < 0.5 and len(workers) > 1:
            await workers.pop(rnd.choice(sorted(workers))).leave()
        elif action < 0.65 and len(workers) > 1:
            await workers.pop(rnd.choice(sorted(workers))).crash()
        else:
            worker = workers[rnd.choice(sorted(workers))]
            worker.stall_s = rnd.choice([0.0, 0.0, 0.01, 0.05])
            continue
        changes += 1
        await check_owners(sub_admin, set(workers))
    await production
    for worker in workers.values():
        worker.stall_s = 0.0
        worker.nack_probability = 0.0
    deadline = time.monotonic() + 60
    while True:
        info = await sub_admin.describe_subscription(TOPIC, "s")
        if checker.failure is not None:
            raise checker.failure
        if all(p.mark_delete == p.end_offset for p in info.partitions):
            break
        assert time.monotonic() < deadline, f"the subscription never drained: {info}"
        await asyncio.sleep(0.05)
    for worker in list(workers.values()):
        await worker.leave()
    await producer.close()
    await sub_admin.close()
    total = sum(p.end_offset for p in info.partitions)
    assert total == events
    assert len(checker.acked) == events, "an event was never acknowledged"
    return checker


def test_key_shared_churn_keeps_order_and_loses_nothing(tmp_path: Path) -> None:
    seed = int(os.environ.get("KEYBUS_CHURN_SEED", random.randrange(1 << 30)))
    events = int(os.environ.get("KEYBUS_CHURN_EVENTS", 100_000))
    broker = BrokerProcess(tmp_path / "data", "--no-fsync")
    broker.start()
    began = time.monotonic()
    try:
        checker = asyncio.run(scenario(broker.address, seed, events, "auto_split"))
    except BaseException as error:
        print(f"churn test failed: seed={seed} (replay: KEYBUS_CHURN_SEED={seed})")
        error.add_note(f"replay with KEYBUS_CHURN_SEED={seed}")
        raise
    finally:
        broker.stop()
    print(f"seed {seed}: {events} events, {checker.deliveries} deliveries "
          f"({checker.redeliveries} redeliveries) in {time.monotonic() - began:.1f}s")
    assert checker.redeliveries > 0, "the churn never caused a redelivery"
