"""Goal: the producer's batch flow (sdk/batch_flow.py) sends a burst to an idle partition
as one request at the end of the loop turn, with no timer, gathers while a request of the
partition is outstanding, and sends what gathered as soon as the answer comes (Nagle), or
at its linger when the answer is late.

Method: a real Accumulator and BatchFlow on an event loop, with a small fake in place of
the Sender (it records submitted batches and says which partitions are busy); the test
plays the broker by marking partitions busy or idle. Waits are bounded by conditions on
what was submitted, never by sleeping for the result.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from sdk.accumulator import Accumulator
from sdk.batch_flow import BatchFlow
from sdk.core.pb import keybus_pb2 as pb
from sdk.send_queue import ProducerBatch
from sdk.sender import now_ms


class FakeQueue:
    def __init__(self) -> None:
        self.busy: set[int] = set()

    def busy_partitions(self, window: int = 1) -> set[int]:
        return set(self.busy)


class FakeSender:
    def __init__(self) -> None:
        self.queue = FakeQueue()
        self.submitted: list[ProducerBatch] = []

    def submit(self, batch: ProducerBatch) -> None:
        self.submitted.append(batch)
        self.queue.busy.add(batch.partition)  # written: outstanding until "answered"


def make(linger_ms: int) -> tuple[Accumulator[Any], FakeSender, BatchFlow]:
    loop = asyncio.get_running_loop()
    acc: Accumulator[Any] = Accumulator(partitions=2, linger_ms=linger_ms, batch_events_max=100,
                                        batch_bytes_max=1 << 20, buffer_events_max=1000,
                                        new_token=loop.create_future)
    sender = FakeSender()
    flow = BatchFlow(acc, contextlib.nullcontext(), sender, "t", 60_000)  # type: ignore[arg-type]
    return acc, sender, flow


def send(acc: Accumulator[Any], flow: BatchFlow, key: int, partition: int = 0) -> None:
    acc.add(key, b"v", None, partition, "", pb.UPSERT, "", None, 0, now_ms())
    if acc.wake:
        acc.wake = False
        flow.schedule()


async def until(condition: Any, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0)


def keys(batch: ProducerBatch) -> list[int]:
    return list(batch.request.batch.key_ints)


async def _a_burst_to_an_idle_partition_leaves_at_the_turn_end_as_one_request() -> None:
    acc, sender, flow = make(linger_ms=60_000)  # a linger that would never fire in the test
    for k in range(5):
        send(acc, flow, k)
    assert sender.submitted == []  # still in the turn that sent them
    await asyncio.sleep(0)
    assert [keys(b) for b in sender.submitted] == [[0, 1, 2, 3, 4]]


async def _a_busy_partition_gathers_until_the_answer() -> None:
    acc, sender, flow = make(linger_ms=60_000)
    send(acc, flow, 1)
    await until(lambda: len(sender.submitted) == 1)
    send(acc, flow, 2)  # the first request is outstanding
    send(acc, flow, 3)
    send(acc, flow, 4, partition=1)  # another partition is idle: it goes at once
    await until(lambda: len(sender.submitted) == 2)
    assert keys(sender.submitted[1]) == [4] and sender.submitted[1].partition == 1
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(sender.submitted) == 2  # partition 0 still waits: no answer yet
    sender.queue.busy.discard(0)  # the answer came; the producer's batch-done hook schedules
    flow.schedule()
    await until(lambda: len(sender.submitted) == 3)
    assert keys(sender.submitted[2]) == [2, 3]


async def _a_late_answer_does_not_hold_a_batch_past_its_linger() -> None:
    acc, sender, flow = make(linger_ms=20)
    flow.start()
    try:
        send(acc, flow, 1)
        await until(lambda: len(sender.submitted) == 1)
        send(acc, flow, 2)  # partition 0 stays busy: only the linger task can send it
        await until(lambda: len(sender.submitted) == 2)
        assert keys(sender.submitted[1]) == [2]
    finally:
        await flow.stop()


async def _force_sends_every_open_batch_busy_or_not() -> None:
    acc, sender, flow = make(linger_ms=60_000)
    sender.queue.busy = {0, 1}
    acc.add(1, b"v", None, 0, "", pb.UPSERT, "", None, 0, now_ms())
    acc.add(2, b"v", None, 1, "", pb.UPSERT, "", None, 0, now_ms())
    flow.drain()
    assert sender.submitted == []
    flow.drain(force=True)
    assert sorted(b.partition for b in sender.submitted) == [0, 1]


def test_a_burst_to_an_idle_partition_leaves_at_the_turn_end_as_one_request() -> None:
    asyncio.run(_a_burst_to_an_idle_partition_leaves_at_the_turn_end_as_one_request())


def test_a_busy_partition_gathers_until_the_answer() -> None:
    asyncio.run(_a_busy_partition_gathers_until_the_answer())


def test_a_late_answer_does_not_hold_a_batch_past_its_linger() -> None:
    asyncio.run(_a_late_answer_does_not_hold_a_batch_past_its_linger())


def test_force_sends_every_open_batch_busy_or_not() -> None:
    asyncio.run(_force_sends_every_open_batch_busy_or_not())


async def _a_window_of_two_sends_a_second_request_before_the_first_is_answered() -> None:
    loop = asyncio.get_running_loop()
    acc: Accumulator[Any] = Accumulator(partitions=1, linger_ms=60_000, batch_events_max=100,
                                        batch_bytes_max=1 << 20, buffer_events_max=1000,
                                        new_token=loop.create_future)
    sender = WindowSender()
    flow = BatchFlow(acc, contextlib.nullcontext(), sender, "t", 60_000,  # type: ignore[arg-type]
                     nagle_window=2)
    for key in (1, 2, 3):
        send(acc, flow, key)
        await asyncio.sleep(0)
    # 1 and 2 leave at once (up to two outstanding); 3 waits for an answer
    assert [keys(b) for b in sender.submitted] == [[1], [2]]
    sender.outstanding -= 1  # an answer
    flow.schedule()
    await until(lambda: len(sender.submitted) == 3)
    assert keys(sender.submitted[2]) == [3]


class WindowSender(FakeSender):
    """Counts outstanding requests of partition 0 for busy_partitions(window)."""

    def __init__(self) -> None:
        super().__init__()
        self.outstanding = 0
        self.queue = self  # type: ignore[assignment]

    def submit(self, batch: ProducerBatch) -> None:
        self.submitted.append(batch)
        self.outstanding += 1

    def busy_partitions(self, window: int = 1) -> set[int]:
        return {0} if self.outstanding >= window else set()


def test_a_window_of_two_sends_a_second_request_before_the_first_is_answered() -> None:
    asyncio.run(_a_window_of_two_sends_a_second_request_before_the_first_is_answered())


async def _an_answered_request_disarms_the_linger_timer() -> None:
    acc, sender, flow = make(linger_ms=20)
    flow.start()
    try:
        send(acc, flow, 1)
        await until(lambda: len(sender.submitted) == 1)
        send(acc, flow, 2)  # partition 0 is busy: the batch waits, the linger timer is armed
        await asyncio.sleep(0)
        assert len(sender.submitted) == 1 and flow._timer is not None
        sender.queue.busy.discard(0)  # the answer: what gathered leaves, the timer goes
        flow.schedule()
        await until(lambda: len(sender.submitted) == 2)
        assert flow._timer is None
    finally:
        await flow.stop()


def test_an_answered_request_disarms_the_linger_timer() -> None:
    asyncio.run(_an_answered_request_disarms_the_linger_timer())
