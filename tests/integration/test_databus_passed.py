"""A Databus consumer whose server-side filter rarely matches still checkpoints past the windows it drops.

Goal: on a busy topic, a registration whose filter (`mod:1000:[999]`) drops
nearly every window moves its checkpoint on anyway, to the end of a whole
window the broker passed, so that after retention trimmed the log past where
its last matching window was, a clean restart resumes: no "events are
missing" (OffsetOutOfRange), no bootstrap, and every matching event arrives
exactly once. Before, the broker's follow Read sent nothing for records the
filter dropped, the checkpoint stayed at the last matching window, and the
restart failed with OffsetOutOfRange although nothing was missed (the limit
docs/databus.md used to state). An unfiltered follow read gets no such
position: nothing changes for it.
Method: one broker process (retention every 100 ms, positions at most every
200 ms); a topic of 1 partition that keeps about 75 windows; windows of 10
events, three matching events in all (one early, one while the first run
consumes, one between the runs); a file checkpoint store; the registration
runs, is stopped cleanly, and runs again from its checkpoint.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from sdk import Admin, Producer, Reader, TopicReader
from sdk.databus import SUCCESS, DatabusClient, DatabusConsumerBase, DbusEvent
from sdk.databus.results import CallbackResult
from sdk.read_batch import PassedPosition, ReadBatch
from sdk.stores import FileCheckpointStore
from tests.support.bootstrap_model import describe_partition
from tests.support.broker_process import BrokerProcess

TOPIC = "rare-matches"
FILTER = "mod:1000:[999]"
WINDOW_EVENTS = 10


@pytest.fixture(scope="module")
def passing_broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    process = BrokerProcess(tmp_path_factory.mktemp("passed") / "data",
                            "--retention-check-interval-ms", "100",
                            "--read-passed-interval-ms", "200")
    process.start()
    yield process
    process.stop()


class Matches(DatabusConsumerBase):
    def __init__(self) -> None:
        self.keys: list[int] = []
        self.errors: list[Exception] = []

    def on_event(self, event: DbusEvent) -> CallbackResult:
        assert isinstance(event.key, int)
        self.keys.append(event.key)
        return SUCCESS

    def on_error(self, error: Exception) -> CallbackResult:
        self.errors.append(error)
        return SUCCESS


class Windows:
    """Produces windows of WINDOW_EVENTS events; remembers where each ends."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.ends: set[tuple[int, int]] = set()  # (last offset, scn) of every window
        self.matching_offsets: list[int] = []
        self.n = 0

    async def send(self, match: bool = False) -> None:
        keys = [self.n * 1000 + i for i in range(WINDOW_EVENTS)]  # k % 1000 < 10: no match
        if match:
            keys[-1] = self.n * 1000 + 999
        self.n += 1
        result = await self.producer.send_window(
            [{"key": k, "value": b"x" * 100} for k in keys], partition=0)
        self.ends.add((result.base_offset + WINDOW_EVENTS - 1, result.scn))
        if match:
            self.matching_offsets.append(result.base_offset + WINDOW_EVENTS - 1)


async def _until(condition: Any, timeout_s: float = 30) -> bool:
    """Poll `condition` until it holds (True) or `timeout_s` passed (False)."""
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def _scenario(broker: BrokerProcess, root: Path) -> None:
    async with Admin(broker.address) as admin:
        await admin.create_topic(TOPIC, partitions=1, retention_bytes=100_000)
    store = FileCheckpointStore(root)
    first = Matches()
    async with await Producer.create(broker.address, TOPIC) as producer:
        windows = Windows(producer)
        await windows.send(match=True)
        client = DatabusClient(broker.address, checkpoint_store=store)
        client.register(first, topic=TOPIC, filter=FILTER, name="rare", start="earliest")
        async with client:
            for i in range(600):  # busy: far past what retention keeps
                await windows.send(match=i == 150)

            async def trimmed_past_matches() -> bool:
                start = (await describe_partition(broker.address, TOPIC)).start_offset
                return start > windows.matching_offsets[-1] + 1

            assert await _until(trimmed_past_matches), "retention never passed the matches"
            end = (await describe_partition(broker.address, TOPIC)).end_offset

            async def checkpoint_at_end() -> bool:
                checkpoint = await store.get_checkpoint("", TOPIC, "rare", 0)
                return checkpoint is not None and checkpoint.offset == end - 1

            moved = await _until(checkpoint_at_end, timeout_s=20)
        checkpoint = await store.get_checkpoint("", TOPIC, "rare", 0)
        assert checkpoint is not None and (checkpoint.offset, checkpoint.scn) in windows.ends, \
            f"checkpoint {checkpoint} is not the end of a stored window"
        assert first.keys == [999, 151_999] and not first.errors, (first.keys, first.errors)
        await windows.send(match=True)  # between the runs: key 601_999
        for _ in range(5):
            await windows.send()

    second = Matches()
    client = DatabusClient(broker.address, checkpoint_store=store)
    client.register(second, topic=TOPIC, filter=FILTER, name="rare")
    async with client:
        async def got_the_new_match() -> bool:
            return bool(second.keys or second.errors)

        assert await _until(got_the_new_match), "nothing after the restart"
        await asyncio.sleep(0.5)  # room for a duplicate or an error to show
    assert not second.errors, f"the restart failed: {second.errors}"
    assert second.keys == [601_999], second.keys
    assert moved, f"the checkpoint stayed behind the windows the filter dropped: {checkpoint}"


def test_a_rarely_matching_filter_checkpoints_past_dropped_windows_and_restarts_cleanly(
        passing_broker: BrokerProcess, tmp_path: Path) -> None:
    asyncio.run(_scenario(passing_broker, tmp_path))


async def _items(broker: BrokerProcess, topic: str, key_filter: str | None,
                 how: str = "items") -> list[Any]:
    """What a follow read yields over the topic within about a second: a Reader's
    items(), or plain iteration of a Reader or a TopicReader."""
    items: list[Any] = []
    options: dict[str, Any] = {"start": "earliest", "follow": True, "key_filter": key_filter}
    reader = TopicReader(broker.address, topic, **options) if how == "topic" \
        else Reader(broker.address, topic, 0, **options)
    async with reader:
        async def collect() -> None:
            source = reader.items() if isinstance(reader, Reader) and how == "items" else reader
            async for item in source:
                items.append(item)
        task = asyncio.create_task(collect())
        await asyncio.sleep(1.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return items


def _keys(batches: list[ReadBatch]) -> list[int | str]:
    keys: list[int | str] = []
    for batch in batches:
        keys.extend(batch.keys())
    return keys


def test_a_follow_read_tells_positions_only_when_it_filters(
        passing_broker: BrokerProcess) -> None:
    async def go() -> tuple[list[Any], list[Any], list[Any], list[Any], set[tuple[int, int]]]:
        async with Admin(passing_broker.address) as admin:
            await admin.create_topic("positions", partitions=1)
        async with await Producer.create(passing_broker.address, "positions") as producer:
            windows = Windows(producer)
            for i in range(30):
                await windows.send(match=i == 3)
        return (await _items(passing_broker, "positions", FILTER),
                await _items(passing_broker, "positions", None),
                await _items(passing_broker, "positions", FILTER, "plain"),
                await _items(passing_broker, "positions", FILTER, "topic"), windows.ends)

    filtered, unfiltered, plain, topic, ends = asyncio.run(go())
    passed = [item for item in filtered if isinstance(item, PassedPosition)]
    batches = [item for item in filtered if not isinstance(item, PassedPosition)]
    assert _keys(batches) == [3999]
    assert passed and (passed[-1].offset, passed[-1].scn) == max(ends), \
        f"no position at the last window {max(ends)}: {passed}"
    assert all((p.offset, p.scn) in ends for p in passed), "a position inside a window"
    assert len(unfiltered) == 30 and not any(isinstance(i, PassedPosition) for i in unfiltered)
    for batches in (plain, topic):  # iterating yields the batch, no empty one, no position
        assert _keys(batches) == [3999], batches
        assert all(isinstance(b, ReadBatch) and b.count for b in batches), batches
