"""A Databus registration that cannot start tells its consumers, against a real broker.

Goal: under `async with client:` (where nothing awaits `wait()`), a
registration that cannot start is never silent: its consumers get
on_start_consumption, on_error with the cause, then on_stop_consumption, the
`keybus.databus` logger says it at WARNING, `stop()` raises nothing and
`wait()` raises the cause. Cases: a topic that does not exist, a closed
port, a setting the broker refuses (register_shared with ack_timeout_ms=200),
and a checkpoint saved in the middle of a bootstrap restarted without
bootstrap=True (the error names the phase and what to do). A broker that
accepts connections but never answers is reported within seconds
(`unavailable_report_ms`), and stop() then returns promptly.
Method: one broker process for the module; consumers record their calls;
the test waits on conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sdk import Admin, errors
from sdk.bootstrap import BootstrapPosition
from sdk.consumer import ConsumerConfig
from sdk.databus import SUCCESS, DatabusClient, DatabusConfig, DatabusConsumerBase
from sdk.databus.results import CallbackResult
from sdk.stores import FileCheckpointStore
from sdk.stores.records import Checkpoint
from tests.support.broker_process import BrokerProcess


class Lifecycle(DatabusConsumerBase):
    """Records on_start_consumption, on_error(error) and on_stop_consumption, with times."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.began = time.monotonic()
        self.error_at_s: float | None = None

    def on_start_consumption(self) -> CallbackResult:
        self.calls.append("start")
        return SUCCESS

    def on_error(self, error: Exception) -> CallbackResult:
        self.calls.append(("error", error))
        if self.error_at_s is None:
            self.error_at_s = time.monotonic() - self.began
        return SUCCESS

    def on_stop_consumption(self) -> CallbackResult:
        self.calls.append("stop")
        return SUCCESS


async def until(condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.02)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def mid_bootstrap_checkpoint(broker: BrokerProcess, directory: Path) -> FileCheckpointStore:
    """A topic and a checkpoint as a bootstrap stopped after its first snapshot sequence
    leaves it (what LogWindows.persist writes)."""
    async with Admin(broker.address) as admin:
        await admin.create_topic("starts-boot", partitions=1)
    store = FileCheckpointStore(directory)
    position = BootstrapPosition("snapshot", snapshot_offset=11, source="a", key=7)
    await store.update_checkpoint(Checkpoint("", "starts-boot", "r", 0, 11, 12,
                                             bootstrap=json.dumps(position.to_dict())))
    return store


@pytest.mark.parametrize("case", ["no_topic", "closed_port", "refused_setting",
                                  "mid_bootstrap_checkpoint"])
def test_a_registration_that_cannot_start_tells_its_consumers(
        shared_broker: BrokerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        case: str) -> None:
    async def go() -> tuple[Lifecycle, BaseException | None]:
        consumer = Lifecycle()
        if case == "closed_port":
            client = DatabusClient(f"127.0.0.1:{closed_port()}")
            client.register(consumer, topic="anything")
        elif case == "refused_setting":
            async with Admin(shared_broker.address) as admin:
                await admin.create_topic("starts-shared", partitions=1)
            client = DatabusClient(shared_broker.address)
            client.register_shared(consumer, topic="starts-shared", subscription="s",
                                   consumer_config=ConsumerConfig(ack_timeout_ms=200))
        elif case == "mid_bootstrap_checkpoint":
            store = await mid_bootstrap_checkpoint(shared_broker, tmp_path)
            client = DatabusClient(shared_broker.address, checkpoint_store=store)
            client.register(consumer, topic="starts-boot", name="r")  # no bootstrap=True
        else:
            client = DatabusClient(shared_broker.address)
            client.register(consumer, topic="no-such-topic")
        async with client:  # __aexit__ -> stop() must not raise
            await until(lambda: "stop" in consumer.calls)
        try:
            await client.wait()
        except Exception as e:
            return consumer, e
        return consumer, None

    with caplog.at_level(logging.INFO, logger="keybus.databus"):
        consumer, raised = asyncio.run(go())
    assert raised is not None
    assert consumer.calls == ["start", ("error", raised), "stop"]
    expected = {"no_topic": (errors.TopicNotFound, "does not exist"),
                "closed_port": (errors.Unavailable, "cannot reach broker"),
                "refused_setting": (errors.InvalidArgument, "ack_timeout_ms=200"),
                "mid_bootstrap_checkpoint": (errors.FailedPrecondition, "phase snapshot")}
    kind, says = expected[case]
    assert isinstance(raised, kind) and says in str(raised), repr(raised)
    if case == "mid_bootstrap_checkpoint":
        assert "bootstrap=True" in str(raised) and "remove that checkpoint" in str(raised)
    assert any(r.levelno == logging.WARNING and "cannot start" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_a_broker_that_never_answers_is_reported_within_seconds() -> None:
    """A listener that accepts and says nothing: the open hangs (grpc gives up after
    about 20 s); the consumers hear of it after unavailable_report_ms, and stop() ends
    the wait."""

    async def go() -> tuple[Lifecycle, float]:
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            consumer = Lifecycle()
            client = DatabusClient(f"127.0.0.1:{silent.getsockname()[1]}",
                                   config=DatabusConfig(unavailable_report_ms=500))
            client.register(consumer, topic="anything")
            async with client:
                await until(lambda: consumer.error_at_s is not None, timeout_s=10)
                stopping = time.monotonic()
            return consumer, time.monotonic() - stopping

    consumer, stop_s = asyncio.run(go())
    assert consumer.error_at_s is not None and consumer.error_at_s < 5
    assert consumer.calls[0] == "start" and consumer.calls[-1] == "stop"
    (_, notice), = [c for c in consumer.calls if isinstance(c, tuple)]
    assert isinstance(notice, errors.Unavailable) and "unreachable" in str(notice)
    assert stop_s < 3, f"stop() took {stop_s:.1f} s"
