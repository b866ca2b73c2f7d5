"""A Databus registration that cannot start tells its consumers, against a real broker.

Goal: under `async with client:` (where nothing awaits `wait()`), a
registration that cannot start is never silent: its consumers get
on_start_consumption, on_error with the cause, then on_stop_consumption, the
`keybus.databus` logger says it at WARNING, `stop()` raises nothing and
`wait()` raises the cause. Cases that fail at once (the broker answered): a
topic that does not exist, a setting the broker refuses (register_shared with
ack_timeout_ms=200), and a checkpoint saved in the middle of a bootstrap
restarted without bootstrap=True (the error names the phase and what to do).
A closed port is retried (said once in the log) and fails so only after
`connect_timeout_ms`, as the SDK's other clients do; a broker that comes up on
that port meanwhile is used and its events are consumed (a client and its
broker restarted together). A broker that accepts connections but never
answers is reported within seconds (`unavailable_report_ms`), and stop() then
returns promptly.
Method: one broker process for the module (and one of its own for the broker
that comes up); consumers record their calls; the test waits on conditions
with deadlines.
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

from sdk import Admin, Producer, errors
from sdk.bootstrap import BootstrapPosition
from sdk.consumer import ConsumerConfig
from sdk.databus import (
    SUCCESS,
    DatabusClient,
    DatabusConfig,
    DatabusConsumerBase,
    DbusEvent,
)
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


@pytest.mark.parametrize("case", ["no_topic", "refused_setting", "mid_bootstrap_checkpoint"])
def test_a_registration_that_cannot_start_tells_its_consumers(
        shared_broker: BrokerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        case: str) -> None:
    async def go() -> tuple[Lifecycle, BaseException | None]:
        consumer = Lifecycle()
        if case == "refused_setting":
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
                "refused_setting": (errors.InvalidArgument, "ack_timeout_ms=200"),
                "mid_bootstrap_checkpoint": (errors.FailedPrecondition, "phase snapshot")}
    kind, says = expected[case]
    assert isinstance(raised, kind) and says in str(raised), repr(raised)
    if case == "mid_bootstrap_checkpoint":
        assert "bootstrap=True" in str(raised) and "remove that checkpoint" in str(raised)
    assert any(r.levelno == logging.WARNING and "cannot start" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert not any("retrying" in r.getMessage() for r in caplog.records), \
        "an answer from the broker is not retried"


def retrying_logs(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "cannot reach broker" in r.getMessage()
            and "retrying" in r.getMessage()]


@pytest.mark.parametrize("shared", [False, True], ids=["register", "register_shared"])
def test_a_closed_port_is_retried_then_fails_clearly(caplog: pytest.LogCaptureFixture,
                                                     shared: bool) -> None:
    """Nothing listens: the first connection is retried for connect_timeout_ms (one
    WARNING says so, at the first failure, for a Key_Shared registration too), then
    the registration fails with the clear Unavailable."""

    async def go() -> tuple[Lifecycle, BaseException | None, float]:
        consumer = Lifecycle()
        client = DatabusClient(f"127.0.0.1:{closed_port()}",
                               config=DatabusConfig(connect_timeout_ms=1_500))
        if shared:
            client.register_shared(consumer, topic="anything", subscription="s")
        else:
            client.register(consumer, topic="anything")
        async with client:
            await until(lambda: "stop" in consumer.calls)
        took_s = time.monotonic() - consumer.began
        try:
            await client.wait()
        except Exception as e:
            return consumer, e, took_s
        return consumer, None, took_s

    with caplog.at_level(logging.INFO, logger="keybus.databus"):
        consumer, raised, took_s = asyncio.run(go())
    assert consumer.calls == ["start", ("error", raised), "stop"]
    assert isinstance(raised, errors.Unavailable), repr(raised)
    assert "cannot reach broker" in str(raised) and "connection refused" in str(raised)
    (retrying,) = retrying_logs(caplog)  # said once, not once per attempt
    assert retrying.levelno == logging.WARNING
    assert "connect_timeout_ms=1500" in retrying.getMessage(), retrying.getMessage()
    assert any("cannot start" in r.getMessage() for r in caplog.records)
    assert took_s < 1.5 + 10, f"gave up after {took_s:.1f} s"  # bounded, not forever


async def produce_keys(address: str, topic: str, keys: list[int]) -> None:
    async with await Producer.create(address, topic) as producer:
        for key in keys:
            await producer.send_window([{"key": key, "value": b"v", "source": "s"}],
                                       partition=0)


class Collect(Lifecycle):
    def __init__(self) -> None:
        super().__init__()
        self.keys: list[int | str] = []

    def on_event(self, event: DbusEvent) -> CallbackResult:
        self.keys.append(event.key)
        return SUCCESS


def test_a_broker_that_comes_up_during_the_wait_is_used(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A client started while its broker is down (restarting on its port and data) waits
    for it and consumes what it holds, with no restart of the client."""
    broker = BrokerProcess(tmp_path / "data")
    broker.start()

    async def go() -> Collect:
        async with Admin(broker.address) as admin:
            await admin.create_topic("comes-up", partitions=1)
        await produce_keys(broker.address, "comes-up", [1, 2, 3])
        broker.stop()  # down: the port is closed when the client starts
        consumer = Collect()
        client = DatabusClient(broker.address, config=DatabusConfig(connect_timeout_ms=60_000))
        client.register(consumer, topic="comes-up")
        async with client:
            await until(lambda: bool(retrying_logs(caplog)) or "stop" in consumer.calls)
            assert "stop" not in consumer.calls, consumer.calls  # it waits, not fails
            await asyncio.to_thread(broker.start)
            await until(lambda: len(consumer.keys) >= 3 or "stop" in consumer.calls,
                        timeout_s=30)
        return consumer

    try:
        with caplog.at_level(logging.INFO, logger="keybus.databus"):
            consumer = asyncio.run(go())
    finally:
        broker.stop()
    assert consumer.keys == [1, 2, 3]
    assert not any(isinstance(c, tuple) for c in consumer.calls), consumer.calls
    assert consumer.calls == ["start", "stop"]


def test_a_broker_that_never_answers_is_reported_within_seconds(
        caplog: pytest.LogCaptureFixture) -> None:
    """A listener that accepts and says nothing (a frozen broker): the open hangs (grpc
    gives up after about 20 s); the consumers hear of it after unavailable_report_ms,
    and stop() ends the wait. Never reached, it is "cannot reach", not "lost"."""

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

    with caplog.at_level(logging.INFO, logger="keybus.databus"):
        consumer, stop_s = asyncio.run(go())
    assert consumer.error_at_s is not None and consumer.error_at_s < 5
    assert consumer.calls[0] == "start" and consumer.calls[-1] == "stop"
    (_, notice), = [c for c in consumer.calls if isinstance(c, tuple)]
    assert isinstance(notice, errors.Unavailable), repr(notice)
    assert str(notice).startswith("cannot reach broker at 127.0.0.1:"), str(notice)
    logged = [r.getMessage() for r in caplog.records]
    assert any("cannot reach broker at 127.0.0.1:" in line for line in logged), logged
    assert not any("lost the broker" in line for line in logged), logged
    # it never started: nothing to resume (the line said "windows resume where they stopped")
    assert any(line.endswith("; retrying; the registration starts once it answers")
               for line in logged), logged
    assert not any("windows resume" in line for line in logged), logged
    assert stop_s < 3, f"stop() took {stop_s:.1f} s"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65_536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def forward_later(port: int, to: str, after_s: float) -> asyncio.Server:
    """A listener on 127.0.0.1:`port`, opened `after_s` from now, that forwards every
    connection to the broker at `to`: that broker as seen by a client whose port was
    closed until then (a restart, timed to the millisecond a process start is not)."""
    await asyncio.sleep(after_s)
    host, to_port = to.rsplit(":", 1)

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(to_port))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return await asyncio.start_server(forward, "127.0.0.1", port)


def test_a_broker_back_after_3_1_s_of_the_5_s_connect_timeout_is_waited_for(
        shared_broker: BrokerProcess) -> None:
    """connect_timeout_ms (5 s by default) reads as "keep trying for this long": the
    last attempt is at 5 s, so a broker back at 3.6 s is used (the attempts went at 0,
    0.1, 0.3, 0.7, 1.5 and 3.1 s; the rule gave up there, the next wait being 2 s).
    gRPC's own reconnect backoff is capped at 1 s (+20 % jitter), so its channel is
    connected well before the attempt at 5 s."""

    async def go() -> Collect:
        async with Admin(shared_broker.address) as admin:
            await admin.create_topic("back-in-time", partitions=1)
        await produce_keys(shared_broker.address, "back-in-time", [7, 8])
        port = closed_port()
        consumer = Collect()
        client = DatabusClient(f"127.0.0.1:{port}")  # the default connect_timeout_ms
        client.register(consumer, topic="back-in-time")
        opening = asyncio.create_task(forward_later(port, shared_broker.address, 3.6))
        async with client:
            server = await opening
            try:
                await until(lambda: len(consumer.keys) >= 2 or "stop" in consumer.calls,
                            timeout_s=30)
            finally:
                server.close()
        return consumer

    consumer = asyncio.run(go())
    assert consumer.calls == ["start", "stop"], consumer.calls  # no error: it waited
    assert consumer.keys == [7, 8]
