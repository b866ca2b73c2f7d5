"""A checkpoint no registration writes stops a Databus registration with one clear line.

Goal: a checkpoint file edited by hand (or a store of the user's own handing
back what it holds) never makes a registration resume from a wrong place in
silence, nor fail with a parser's or a reader's words. A probe found, with
the file store: an SCN of -1 re-read the whole log from SCN 0 without a word;
an offset of -5 was reported as "retention removed the log below offset 0";
a bootstrap position that is not JSON failed with "Expecting value: line 1
column 1 (char 0)"; a negative offset or a list as the key in a bootstrap
position failed inside the reader task with a traceback ("Value out of range:
-3"). Now each stops consumption with a ValueError naming the checkpoint, the
field and what to do, as other starts that cannot go on do
(test_databus_starts.py). A checkpoint past the log's end (a topic deleted and
created again starts its SCNs over) is still waited on, as a lagging relay
follower needs, but said at WARNING.
Method: one broker process for the module; a topic with a few windows; the
checkpoint file written with the file store, then its JSON replaced.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from sdk import Admin, Producer
from sdk.databus import DatabusClient, DatabusCombinedConsumerBase, DbusEvent
from sdk.databus.results import SUCCESS, CallbackResult
from sdk.stores import FileCheckpointStore
from sdk.stores.records import Checkpoint
from tests.support.broker_process import BrokerProcess

TOPIC = "bad-checkpoints"


class Recorder(DatabusCombinedConsumerBase):
    """Records the lifecycle calls and counts the events."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.events = 0

    def on_start_consumption(self) -> CallbackResult:
        self.calls.append("start")
        return SUCCESS

    def on_event(self, event: DbusEvent) -> CallbackResult:
        self.events += 1
        return SUCCESS

    def on_bootstrap_event(self, event: DbusEvent) -> CallbackResult:
        self.events += 1
        return SUCCESS

    def on_error(self, error: Exception) -> CallbackResult:
        self.calls.append(("error", error))
        return SUCCESS

    def on_stop_consumption(self) -> CallbackResult:
        self.calls.append("stop")
        return SUCCESS


async def _topic_with_windows(broker: BrokerProcess) -> None:
    async with Admin(broker.address) as admin:
        if TOPIC in {t.topic for t in await admin.list_topics()}:
            return
        await admin.create_topic(TOPIC, partitions=1)
    async with await Producer.create(broker.address, TOPIC) as producer:
        for n in range(5):
            await producer.send_window([{"key": n, "value": b"v", "source": "a"}], partition=0)


async def _store_holding(root: Path, fields: dict[str, Any]) -> FileCheckpointStore:
    """A file store whose checkpoint of partition 0 holds `fields` as its JSON."""
    store = FileCheckpointStore(root)
    await store.update_checkpoint(Checkpoint("", TOPIC, "r", 0, 1, 2))
    (path,) = root.rglob("0.json")
    path.write_text(json.dumps({"offset": 1, "scn": 2, "epoch": 0, **fields}))
    return store


def _position(**fields: Any) -> str:
    return json.dumps({"phase": "catchup", "snapshot_offset": 1, "source": None, "key": None,
                       "next_offset": 2, "target_offset": 3, **fields})


BAD = {
    "negative_scn": ({"scn": -1}, "scn -1"),
    "negative_offset": ({"offset": -5}, "offset -5"),
    "position_not_json": ({"bootstrap": "nonsense"}, "not a JSON object"),
    "position_without_offset": ({"bootstrap": json.dumps({"phase": "snapshot"})},
                                "lacks snapshot_offset"),
    "position_negative_offset": ({"bootstrap": _position(snapshot_offset=-3)},
                                 "snapshot_offset -3"),
    "position_list_key": ({"bootstrap": _position(phase="snapshot", source="a", key=[1])},
                          "key [1]"),
}


async def _until(condition: Any, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_checkpoint_stops_the_registration_with_one_clear_line(
        shared_broker: BrokerProcess, tmp_path: Path, case: str) -> None:
    fields, says = BAD[case]

    async def go() -> tuple[Recorder, BaseException | None]:
        await _topic_with_windows(shared_broker)
        store = await _store_holding(tmp_path, fields)
        consumer = Recorder()
        client = DatabusClient(shared_broker.address, checkpoint_store=store)
        client.register(consumer, topic=TOPIC, name="r", bootstrap=True)
        async with client:
            await _until(lambda: "stop" in consumer.calls)
        try:
            await client.wait()
        except Exception as e:
            return consumer, e
        return consumer, None

    consumer, raised = asyncio.run(go())
    assert isinstance(raised, ValueError), repr(raised)
    message = str(raised)
    assert says in message and "remove that checkpoint" in message, message
    assert f"'r' on {TOPIC}/0" in message and "\n" not in message, message
    assert consumer.calls == ["start", ("error", raised), "stop"]
    assert consumer.events == 0


def test_a_checkpoint_past_the_log_end_is_waited_on_and_said(
        shared_broker: BrokerProcess, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    async def go() -> Recorder:
        await _topic_with_windows(shared_broker)
        store = await _store_holding(tmp_path, {"offset": 1_000_000, "scn": 1_000_000})
        consumer = Recorder()
        client = DatabusClient(shared_broker.address, checkpoint_store=store)
        client.register(consumer, topic=TOPIC, name="r")
        async with client:
            await _until(lambda: "start" in consumer.calls)
            await asyncio.sleep(0.3)
        return consumer

    with caplog.at_level(logging.INFO, logger="keybus.databus"):
        consumer = asyncio.run(go())
    assert consumer.events == 0 and not any(isinstance(c, tuple) for c in consumer.calls)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("past the end of" in m and "offset 1000000" in m for m in said), said
