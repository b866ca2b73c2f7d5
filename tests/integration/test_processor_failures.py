"""Event processors that crash or stall, as separate processes, against a
real broker process and a real redis-server; once per ownership store.

Goal: (1) a processor SIGKILLed mid-stream: its partitions are taken once
its ownership expires, the new owners resume from its last checkpoints, and
every produced event is processed at least once; events processed twice are
only those after the checkpoint the new owner resumed from. (2) A stale
owner (SIGSTOPped past the expiration, then SIGCONTed) cannot move the
checkpoint (the broker fences its epoch, naming the new owner) and stops
processing that partition.
Method: processors are `tests.support.processor_process` children that log
every batch, checkpoint and claim as a line written before the next step;
the test reads the lines, the broker's checkpoints and the ownership store.
0.5 s interval, 2 s expiration; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from sdk import Admin, Producer
from sdk.stores import BrokerCheckpointStore
from tests.support.broker_process import BrokerProcess
from tests.support.processor_process import ProcessorProcess
from tests.support.processors import (
    EXPIRATION_MS,
    OWNERSHIP_KINDS,
    ownership_store,
    produce,
    redis_server,  # noqa: F401
    wait_for,
)
from tests.support.redis_server import RedisServer


def redis_for(kind: str, request: pytest.FixtureRequest) -> RedisServer | None:
    return request.getfixturevalue("redis_server") if kind == "redis" else None


async def owners(kind: str, broker: str, redis: RedisServer | None, topic: str,
                 group: str) -> dict[int, str]:
    """partition -> owner of the live records, as the ownership store lists them."""
    store = ownership_store(kind, broker, redis)
    try:
        listed = await store.list_ownership("", topic, group)
    finally:
        await store.close()
    now = time.time_ns() // 1_000_000
    return {o.partition: o.owner_id for o in listed
            if o.owner_id and o.last_modified_ms + EXPIRATION_MS >= now}


def processed(processes: list[ProcessorProcess]) -> Counter[tuple[int, int]]:
    """How often each (partition, offset) was processed, over every process."""
    seen: Counter[tuple[int, int]] = Counter()
    for process in processes:
        for _, partition, first, last in process.lines("B"):
            for offset in range(int(first), int(last) + 1):
                seen[(int(partition), offset)] += 1
    return seen


async def produce_paced(broker: str, topic: str, partitions: int, stop: asyncio.Event,
                        per_round: int = 20) -> int:
    """Send per_round events to each partition every 50 ms until stop; returns the count per partition."""
    sent = 0
    async with await Producer.create(broker, topic) as producer:
        while not stop.is_set():
            for partition in range(partitions):
                await producer.send_batch(list(range(sent, sent + per_round)),
                                          [b"v"] * per_round, partition=partition)
            sent += per_round
            await producer.flush()
            await asyncio.sleep(0.05)
    return sent


@pytest.mark.parametrize("kind", OWNERSHIP_KINDS)
def test_a_killed_processors_partitions_resume_from_its_checkpoints(
        kind: str, shared_broker: BrokerProcess, request: pytest.FixtureRequest,
        tmp_path: Path) -> None:
    redis = redis_for(kind, request)
    broker, topic, group, partitions = shared_broker.address, f"kill-{kind}", "g", 6

    async def go() -> None:
        async with Admin(broker) as admin:
            await admin.create_topic(topic, partitions=partitions)
        processes = [ProcessorProcess(tmp_path / f"p{i}.txt", broker, topic, group, f"p{i}",
                                      redis.url if redis else None, "--checkpoint-every", "200")
                     for i in range(3)]
        for process in processes:
            process.start()
        try:
            await wait_for(lambda: _settled(kind, redis, broker, topic, group, processes,
                                            [2, 2, 2]), 60, "3 processes at 2/2/2")
            stop = asyncio.Event()
            producing = asyncio.create_task(produce_paced(broker, topic, partitions, stop))
            victim = processes[0]
            # Killed between checkpoints: it has processed a batch after its last one.
            await wait_for(lambda: len(victim.lines("C")) >= 2 and victim.lines()[-1][0] == "B",
                           30, "the victim processing after a checkpoint")
            held = {p for p, o in (await owners(kind, broker, redis, topic, group)).items()
                    if o == "p0"}
            victim.kill()
            killed_at = time.monotonic()
            await wait_for(lambda: _taken(kind, redis, broker, topic, group, held), 30,
                           f"the victim's partitions {held} taken")
            taken_s = time.monotonic() - killed_at
            await asyncio.sleep(0.5)
            stop.set()
            sent = await producing
            await wait_for(lambda: len(processed(processes)) >= partitions * sent, 60,
                           "every produced event processed")
            _check_at_least_once(processes, held, partitions, sent)
            # Taken after the expiration (it never released), not long after it.
            assert EXPIRATION_MS / 1000 * 0.5 < taken_s < EXPIRATION_MS / 1000 + 10, taken_s
        finally:
            for process in processes:
                process.stop()
    asyncio.run(go())


def _check_at_least_once(processes: list[ProcessorProcess], held: set[int], partitions: int,
                         sent: int) -> None:
    victim, survivors = processes[0], processes[1:]
    seen = processed(processes)
    assert all(seen[(p, o)] >= 1 for p in range(partitions) for o in range(sent))
    last_checkpoint = {int(p): int(o) for _, p, o, _ in victim.lines("C")}
    duplicates = 0
    for partition in held:
        # The new owner's start line: it resumed after the victim's last checkpoint.
        starts = [int(s) for process in survivors for _, p, _, s in process.lines("S")
                  if int(p) == partition and s != "-"]
        assert starts, f"partition {partition} was not resumed from a checkpoint"
        start = max(starts)
        assert start - 1 >= last_checkpoint.get(partition, -1)
        again = [o for (p, o), n in seen.items() if p == partition and n > 1]
        assert all(o >= start for o in again), (partition, start, again[:5])
        duplicates += len(again)
    others = [k for k, n in seen.items() if n > 1 and k[0] not in held]
    assert not others, others[:5]  # no handover there, no duplicate
    print(f"duplicates after the kill: {duplicates} (only after the resumed checkpoints)")
    assert duplicates > 0  # it was killed after processing past its last checkpoint


def open_partitions(process: ProcessorProcess) -> set[int]:
    """Partitions the process opened (S) and has not closed (X) since."""
    opened: set[int] = set()
    for row in process.lines():
        if row[0] == "S":
            opened.add(int(row[1]))
        elif row[0] == "X":
            opened.discard(int(row[1]))
    return opened


async def _settled(kind: str, redis: RedisServer | None, broker: str, topic: str, group: str,
                   processes: list[ProcessorProcess], counts: list[int]) -> bool:
    """Balanced in the store, and every process processes exactly what it owns there
    (a partition stolen is closed by its old owner only at that one's next cycle)."""
    found = await owners(kind, broker, redis, topic, group)
    if sorted(Counter(found.values()).values()) != counts or len(found) != sum(counts):
        return False
    return all(open_partitions(p) == {q for q, o in found.items() if o == p.owner}
               for p in processes)


async def _taken(kind: str, redis: RedisServer | None, broker: str, topic: str, group: str,
                 held: set[int]) -> bool:
    found = await owners(kind, broker, redis, topic, group)
    return all(found.get(p) not in (None, "p0") for p in held)


@pytest.mark.parametrize("kind", OWNERSHIP_KINDS)
def test_a_stale_owner_cannot_move_the_checkpoint_and_stops(
        kind: str, shared_broker: BrokerProcess, request: pytest.FixtureRequest,
        tmp_path: Path) -> None:
    redis = redis_for(kind, request)
    broker, topic, group = shared_broker.address, f"stale-{kind}", "g"

    async def go() -> None:
        async with Admin(broker) as admin:
            await admin.create_topic(topic, partitions=2)
        url = redis.url if redis else None
        # The stale one handles each batch slowly (1 s), checkpointing after every batch.
        stale = ProcessorProcess(tmp_path / "stale.txt", broker, topic, group, "stale", url,
                                 "--checkpoint-every", "1", "--handler-sleep-ms", "1000")
        fresh = ProcessorProcess(tmp_path / "fresh.txt", broker, topic, group, "fresh", url,
                                 "--checkpoint-every", "1")
        stale.start()
        fresh.start()
        try:
            await wait_for(lambda: _settled(kind, redis, broker, topic, group, [stale, fresh],
                                            [1, 1]), 60, "one partition each")
            await produce(broker, topic, 2, 5)
            mine = {p for p, o in (await owners(kind, broker, redis, topic, group)).items()
                    if o == "stale"}
            [partition] = mine
            await wait_for(lambda: any(int(p) == partition for _, p, _, _ in stale.lines("H")),
                           30, "the stale one handling a batch")
            stale.signal(signal.SIGSTOP)  # paused inside its 1 s handler
            paused_lines = len(stale.lines())
            await wait_for(lambda: _fresh_checkpointed(fresh, partition), 30,
                           "the fresh one took the partition and checkpointed")
            await produce(broker, topic, 2, 5, first_key=100)
            stale.signal(signal.SIGCONT)
            await wait_for(lambda: any(int(p) == partition for _, p, _ in stale.lines("F")), 30,
                           "the stale one's checkpoint refused")
            await wait_for(lambda: ["X", str(partition), "ownership_lost"] in stale.lines("X"),
                           30, "the stale one closed the partition as lost")
            await _check_fenced(broker, topic, group, partition, stale, fresh, paused_lines)
        finally:
            stale.stop()
            fresh.stop()
    asyncio.run(go())


def _fresh_checkpointed(fresh: ProcessorProcess, partition: int) -> bool:
    return any(int(p) == partition for _, p, _, _ in fresh.lines("C"))


async def _check_fenced(broker: str, topic: str, group: str, partition: int,
                        stale: ProcessorProcess, fresh: ProcessorProcess,
                        paused_lines: int) -> None:
    """Nothing of the stale one's paused claim after the pause: no batch handled, no
    checkpoint stored. The stale one may win the partition back meanwhile (it holds
    none and steals one of the fresh one's two) under a new epoch, from its 'S' line
    on: that claim's work is its own. The store holds the last checkpoint a claim
    that was not paused wrote."""
    await asyncio.sleep(1.0)  # time enough for a stale batch that must not come
    after = stale.lines()[paused_lines:]
    won_back = next((i for i, row in enumerate(after) if row[0] == "S"
                     and int(row[1]) == partition), len(after))
    paused_claim = after[:won_back]
    assert [row for row in paused_claim if row[0] == "C" and int(row[1]) == partition] == []
    assert [row for row in paused_claim if row[0] == "H" and int(row[1]) == partition] == [], \
        after
    stored = [(int(o), int(e)) for who in (stale, fresh) for _, p, o, e in who.lines("C")
              if int(p) == partition]
    async with BrokerCheckpointStore(broker) as store:
        checkpoint = await store.get_checkpoint("", topic, group, partition)
    assert checkpoint is not None and (checkpoint.offset, checkpoint.epoch) == max(stored)
