"""A processor whose claims lapse while its Redis ownership store is gone,
on partitions that get no events.

Goal: once a claim has gone unrenewed for the expiration (by the
processor's clock), the processor no longer treats the partition as its
own, at once, without waiting for an event or for the store: it closes the
partition as "ownership_lost" (on_partition_close once per partition),
`owned_partitions` and `stats.owned` drop it, all while the store is still
down and nothing is produced. When the store comes back (with its records:
the processor's own, now expired, which it claims again under the same
epoch) the processor reopens each partition from its checkpoint, and the
next events resume right after it. The old processor kept such partitions
open (and listed) until an event came or a cycle worked again, and with the
records kept across the outage it never closed them at all.
Method: a real broker process; a real redis-server persisting every write
(AOF, fsync always) that is either SIGKILLed and restarted on the same port
with its data, or SIGSTOPped (then every store call hangs until its 5 s
socket timeout, longer than the expiration) and SIGCONTed. The processor
runs in this process on a 0.5 s interval, 2 s expiration; each condition is
polled with a bounded wait; the times are printed, never asserted.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from sdk import Admin
from sdk.processor import EventProcessor, PartitionContext
from sdk.processor.context import CloseReason
from sdk.reader import ReadBatch
from sdk.stores import RedisOwnershipStore
from tests.support.broker_process import BrokerProcess
from tests.support.processors import EXPIRATION_MS, INTERVAL_MS, produce, wait_for
from tests.support.redis_server import RedisServer, redis_unavailable

PARTITIONS = 2


class Calls:
    """What the callbacks saw, in order: (what, partition, detail)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, object]] = []

    def of(self, what: str) -> list[tuple[int, object]]:
        return [(p, detail) for w, p, detail in self.rows if w == what]

    def on_initialize(self, context: PartitionContext) -> None:
        checkpoint = context.checkpoint.offset if context.checkpoint is not None else -1
        self.rows.append(("init", context.partition, checkpoint))

    def on_close(self, context: PartitionContext, reason: CloseReason) -> None:
        self.rows.append(("close", context.partition, reason))

    async def on_event(self, context: PartitionContext, batch: ReadBatch) -> None:
        self.rows.append(("event", context.partition, (batch.offsets[0], batch.offsets[-1])))
        await context.update_checkpoint(batch)

    def last_offset(self, partition: int) -> int:
        return max((last for p, (_, last) in self.of("event") if p == partition),  # type: ignore[misc]
                   default=-1)


@pytest.fixture
def redis(tmp_path: Path) -> RedisServer:
    reason = redis_unavailable()
    if reason is not None:
        pytest.skip(f"REDIS-SERVER UNAVAILABLE, lapsed-lease tests not run: {reason}")
    return RedisServer(tmp_path / "redis", persist=True)


@pytest.mark.parametrize("outage", ["sigkill", "sigstop"])
def test_a_lapsed_claim_closes_at_once_and_reopens_from_the_checkpoint(
        outage: str, shared_broker: BrokerProcess, redis: RedisServer) -> None:
    broker, topic = shared_broker.address, f"lapse-{outage}"
    calls = Calls()

    async def go() -> None:
        async with Admin(broker) as admin:
            await admin.create_topic(topic, partitions=PARTITIONS)
        # Records outlive the expiration: after the outage the processor finds its own.
        store = RedisOwnershipStore(redis.url, ttl_ms=60_000)
        processor = EventProcessor(
            broker, topic, "g", on_event=calls.on_event,
            on_partition_initialize=calls.on_initialize, on_partition_close=calls.on_close,
            on_error=lambda _context, _error: None, ownership_store=store,
            load_balancing_interval_ms=INTERVAL_MS, ownership_expiration_ms=EXPIRATION_MS,
            owner_id="holder")
        async with processor:
            await wait_for(lambda: processor.owned_partitions == [0, 1], 15, "both claimed")
            await produce(broker, topic, PARTITIONS, 3)
            await wait_for(lambda: all(calls.last_offset(p) == 2 for p in range(PARTITIONS)),
                           15, "the first events processed and checkpointed")
            assert calls.of("close") == []
            await _lapse(outage, redis, processor, calls)
            await _reopen(outage, redis, processor, calls, broker, topic)
        await store.close()
        assert sorted(calls.of("close")) == [(0, "ownership_lost"), (0, "shutdown"),
                                             (1, "ownership_lost"), (1, "shutdown")]

    redis.start()
    try:
        asyncio.run(go())
    finally:
        if redis.process is not None and redis.process.poll() is None:
            redis.process.send_signal(signal.SIGCONT)
        redis.stop()


async def _lapse(outage: str, redis: RedisServer, processor: EventProcessor,
                 calls: Calls) -> None:
    """The store goes away; both partitions close as lost while it is away."""
    assert redis.process is not None
    if outage == "sigkill":
        redis.kill()
    else:
        redis.process.send_signal(signal.SIGSTOP)
    took_s = await wait_for(lambda: len(calls.of("close")) == PARTITIONS, 15,
                            "both partitions closed while the store is away, no event coming")
    print(f"{outage}: closed {took_s:.2f} s into the outage (expiration "
          f"{EXPIRATION_MS / 1000} s, interval {INTERVAL_MS / 1000} s)")
    assert sorted(calls.of("close")) == [(0, "ownership_lost"), (1, "ownership_lost")]
    assert processor.owned_partitions == []
    assert processor.stats.owned == 0
    assert processor.stats.lapses == PARTITIONS
    assert len(calls.of("event")) == PARTITIONS  # nothing was read meanwhile
    if outage == "sigkill":
        assert redis.process.poll() is not None, "the store came back by itself"


async def _reopen(outage: str, redis: RedisServer, processor: EventProcessor, calls: Calls,
                  broker: str, topic: str) -> None:
    """The store returns with its records: each partition reopens from its checkpoint
    (on_partition_initialize again) and resumes right after it."""
    assert redis.process is not None
    if outage == "sigkill":
        redis.start()  # same port, same AOF
    else:
        redis.process.send_signal(signal.SIGCONT)
    began = time.monotonic()
    await wait_for(lambda: len(calls.of("init")) == 2 * PARTITIONS
                   and processor.owned_partitions == [0, 1], 30,
                   "both partitions reopened once the store is back")
    print(f"{outage}: reopened {time.monotonic() - began:.2f} s after the store came back")
    assert sorted(calls.of("init")) == [(0, -1), (0, 2), (1, -1), (1, 2)]
    assert len(calls.of("close")) == PARTITIONS  # closed once each, not again
    assert processor.stats.owned == PARTITIONS
    seen = len(calls.of("event"))
    await produce(broker, topic, PARTITIONS, 2, first_key=10)
    await wait_for(lambda: all(calls.last_offset(p) == 4 for p in range(PARTITIONS)), 15,
                   "the next events processed")
    for partition in range(PARTITIONS):  # right after the checkpoint: nothing again, none skipped
        offsets = [o for p, (first, last) in calls.of("event")[seen:] if p == partition  # type: ignore[misc]
                   for o in range(first, last + 1)]
        assert offsets == [3, 4], (partition, offsets)
