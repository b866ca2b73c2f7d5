"""A Databus registration that bootstrapped checkpoints past the windows its filter drops, online.

Goal: a partition that bootstrapped stays on its Bootstrap stream; once
online, a registration whose server-side filter (`mod:1000:[999]`) drops
nearly every window still moves its checkpoint on, to the end of a whole
window the broker passed, as an ordinary online checkpoint; so after
retention trimmed the log past its last matching window, a clean restart
resumes from the log: no "events are missing" (OffsetOutOfRange), no new
bootstrap, every matching event exactly once. Before, the Bootstrap stream's
online phase sent nothing for records the filter dropped (a follow Read
did), the checkpoint stayed at the last matching window until the
registration restarted, and that restart bootstrapped again (or, without
bootstrap allowed, failed) although nothing was missed. The stream tells
positions online only, at window ends; an unfiltered bootstrap gets none.
Method: one broker process (retention every 100 ms, positions at most every
200 ms); a topic of 1 partition that keeps about 75 windows; windows of 10
events, three matching events in all (one before the bootstrap, one while
the first run is online, one between the runs); a file checkpoint store;
the registration bootstraps, runs, is stopped cleanly, and runs again from
its checkpoint.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sdk import Admin, Producer, Reader
from sdk.databus import SUCCESS, DatabusClient, DatabusCombinedConsumerBase, DbusEvent
from sdk.databus.results import CallbackResult
from sdk.read_batch import PassedPosition, ReadBatch
from sdk.stores import FileCheckpointStore
from tests.integration.test_databus_passed import FILTER, Windows, _keys, _until
from tests.support.bootstrap_model import describe_partition
from tests.support.broker_process import BrokerProcess

TOPIC = "rare-bootstrapped"


@pytest.fixture(scope="module")
def passing_broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    process = BrokerProcess(tmp_path_factory.mktemp("bootpassed") / "data",
                            "--retention-check-interval-ms", "100",
                            "--read-passed-interval-ms", "200")
    process.start()
    yield process
    process.stop()


class Matches(DatabusCombinedConsumerBase):
    def __init__(self) -> None:
        self.keys: list[int] = []  # online events
        self.bootstrap_keys: list[int] = []
        self.calls: Counter[str] = Counter()
        self.errors: list[Exception] = []

    def on_event(self, event: DbusEvent) -> CallbackResult:
        assert isinstance(event.key, int)
        self.keys.append(event.key)
        return SUCCESS

    def on_bootstrap_event(self, event: DbusEvent) -> CallbackResult:
        assert isinstance(event.key, int)
        self.bootstrap_keys.append(event.key)
        return SUCCESS

    def on_start_bootstrap(self) -> CallbackResult:
        self.calls["start_bootstrap"] += 1
        return SUCCESS

    def on_end_bootstrap(self) -> CallbackResult:
        self.calls["end_bootstrap"] += 1
        return SUCCESS

    def on_error(self, error: Exception) -> CallbackResult:
        self.errors.append(error)
        return SUCCESS


async def _scenario(broker: BrokerProcess, root: Path) -> None:
    async with Admin(broker.address) as admin:
        await admin.create_topic(TOPIC, partitions=1, retention_bytes=100_000)
    store = FileCheckpointStore(root)
    first = Matches()
    async with await Producer.create(broker.address, TOPIC) as producer:
        windows = Windows(producer)
        await windows.send(match=True)  # key 999: the bootstrap brings it
        for _ in range(5):
            await windows.send()
        client = DatabusClient(broker.address, checkpoint_store=store)
        client.register(first, topic=TOPIC, filter=FILTER, name="rare", start="bootstrap",
                        bootstrap=True)
        async with client:
            async def online() -> bool:
                return first.calls["end_bootstrap"] == 1 or bool(first.errors)

            assert await _until(online), "the bootstrap never went online"
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
        assert not checkpoint.bootstrap, f"not an ordinary online checkpoint: {checkpoint}"
        assert first.bootstrap_keys == [999] and first.keys == [156_999], \
            (first.bootstrap_keys, first.keys)
        assert first.calls == Counter(start_bootstrap=1, end_bootstrap=1) and not first.errors
        await windows.send(match=True)  # between the runs: key 606_999
        for _ in range(5):
            await windows.send()

    second = Matches()
    client = DatabusClient(broker.address, checkpoint_store=store)
    client.register(second, topic=TOPIC, filter=FILTER, name="rare", bootstrap=True)
    async with client:
        async def got_the_new_match() -> bool:
            return bool(second.keys or second.bootstrap_keys or second.errors)

        assert await _until(got_the_new_match), "nothing after the restart"
        await asyncio.sleep(0.5)  # room for a duplicate or an error to show
    assert not second.errors, f"the restart failed: {second.errors}"
    assert not second.calls and not second.bootstrap_keys, \
        f"the restart bootstrapped again: {second.calls}, {second.bootstrap_keys}"
    assert second.keys == [606_999], second.keys
    assert moved, f"the checkpoint stayed behind the windows the filter dropped: {checkpoint}"


def test_a_bootstrapped_registration_checkpoints_past_dropped_windows_and_restarts_cleanly(
        passing_broker: BrokerProcess, tmp_path: Path) -> None:
    asyncio.run(_scenario(passing_broker, tmp_path))


def _is_online_marker(item: Any) -> bool:
    return isinstance(item, ReadBatch) and item.marker is not None \
        and item.marker.phase == "online"


async def _bootstrap_items(broker: BrokerProcess, topic: str, key_filter: str | None,
                           windows: Windows) -> list[Any]:
    """What a following bootstrap Reader's items() yields: through its ONLINE
    marker, then while 30 more windows (one matching) are produced, then until
    a position at the last window's end comes (at most 10 s)."""
    items: list[Any] = []
    async with Reader(broker.address, topic, 0, start="bootstrap", follow=True,
                      key_filter=key_filter) as reader:
        async def collect() -> None:
            async for item in reader.items():
                items.append(item)
        task = asyncio.create_task(collect())

        async def online() -> bool:
            return any(map(_is_online_marker, items)) or task.done()

        assert await _until(online), f"never online: {items}"
        for i in range(30):
            await windows.send(match=i == 20 and key_filter is not None)

        async def passed_the_last() -> bool:
            return task.done() or any(isinstance(item, PassedPosition)
                                      and (item.offset, item.scn) == max(windows.ends)
                                      for item in items)

        await _until(passed_the_last, timeout_s=10 if key_filter else 1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return items


def test_a_bootstrap_tells_positions_online_only_when_it_filters(
        passing_broker: BrokerProcess) -> None:
    async def go() -> tuple[list[Any], list[Any], set[tuple[int, int]]]:
        async with Admin(passing_broker.address) as admin:
            await admin.create_topic("boot-positions", partitions=1)
        async with await Producer.create(passing_broker.address, "boot-positions") as producer:
            windows = Windows(producer)
            for i in range(30):
                await windows.send(match=i == 3)
            filtered = await _bootstrap_items(passing_broker, "boot-positions", FILTER, windows)
            unfiltered = await _bootstrap_items(passing_broker, "boot-positions", None, windows)
            return filtered, unfiltered, windows.ends

    filtered, unfiltered, ends = asyncio.run(go())
    phases = [item.marker.phase for item in filtered
              if isinstance(item, ReadBatch) and item.marker is not None]
    assert phases == ["snapshot", "catchup", "online"], phases
    online_at = next(i for i, item in enumerate(filtered) if _is_online_marker(item))
    passed = [item for item in filtered if isinstance(item, PassedPosition)]
    assert passed, "no position online"
    assert all(isinstance(item, ReadBatch) for item in filtered[:online_at]), \
        "a position before the stream was online"
    last_of_first_read = max(end for end in ends if end[0] < 600)  # the first 60 windows
    assert (passed[-1].offset, passed[-1].scn) == last_of_first_read, \
        f"no position at the last window {last_of_first_read}: {passed}"
    assert all((p.offset, p.scn) in ends for p in passed), "a position inside a window"
    keys = _keys([item for item in filtered if isinstance(item, ReadBatch)])
    assert keys == [3999, 50_999], keys  # 3_999 bootstrapped, 50_999 online
    assert not any(isinstance(item, PassedPosition) for item in unfiltered), unfiltered
    assert any(map(_is_online_marker, unfiltered))
