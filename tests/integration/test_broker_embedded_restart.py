"""An application embedding the broker stops it and starts it again on the same data
directory, in the same process (as tests embed Kafka or Pulsar standalone).

Goal: `Broker.stop()` releases everything the broker holds: RocksDB's LOCK (the
restart opens the directory again and reads back every event), the /metrics port,
and every thread it started. A start that fails releases them too. Before, the
store's column family handles (kept by the store and the compacted view) held the
database open after `close`, so the second start failed with DataDirInUse; the
/metrics endpoint kept its thread and port, and a failed start kept the LOCK.
Method: real brokers (`start_broker`: gRPC on 127.0.0.1, RocksDB in a temp dir) in
this test's event loop, one after the other on one directory. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path
from typing import cast

import grpc
import pytest

from broker.config import Settings
from broker.server import Broker, start_broker
from keybus.dev_cluster import free_port, port_free
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from tests.support.wire import int_batch

WAIT_S = 20.0
KEYS = list(range(100))
# Threads the broker does not own: grpc's completion-queue poller (one per process) and
# the event loop's default executor (the loop's, shut down with it).
NOT_THE_BROKERS = ("_poll_wrapper", "asyncio_")


def _settings(tmp_path: Path, metrics_port: int = 0) -> Settings:
    return Settings(data_dir=str(tmp_path), port=0, fsync=True, metrics_port=metrics_port)


def _stub(channel: grpc.aio.Channel) -> pb_grpc.KeybusAsyncStub:
    return cast("pb_grpc.KeybusAsyncStub", pb_grpc.KeybusStub(channel))


async def _produce(broker: Broker) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        stub = _stub(channel)
        await stub.CreateTopic(pb.CreateTopicRequest(
            topic="t", config=pb.TopicConfig(partitions=2)), timeout=WAIT_S)
        call = stub.Produce(timeout=WAIT_S)
        for partition in (0, 1):
            await call.write(pb.ProduceRequest(topic="t", partition=partition,
                                               batch=int_batch(KEYS)))
        await call.done_writing()
        responses = [r async for r in call]
        assert [r.error_code for r in responses] == [0, 0], responses


async def _read_back(broker: Broker) -> tuple[list[list[int]], dict[int, bytes]]:
    """Every key read from each partition, and t/0's view by a Bootstrap."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        stub = _stub(channel)
        logs = []
        for partition in (0, 1):
            keys: list[int] = []
            async for response in stub.Read(pb.ReadRequest(
                    topic="t", partition=partition, start=pb.StartPosition(earliest=True)),
                    timeout=WAIT_S):
                for record in response.records:
                    keys += record.batch.key_ints
            logs.append(keys)
        view: dict[int, bytes] = {}
        async for response in stub.Bootstrap(pb.BootstrapRequest(topic="t"), timeout=WAIT_S):
            for record in response.records:
                view.update(zip(record.batch.key_ints, record.batch.values, strict=True))
        return logs, view


def _brokers_threads(before: set[threading.Thread]) -> list[str]:
    return sorted(t.name for t in threading.enumerate()
                  if t not in before and t.is_alive()
                  and not any(part in t.name for part in NOT_THE_BROKERS))


async def _threads_left(before: set[threading.Thread]) -> list[str]:
    """The broker's threads still alive after a bounded wait (none, once it stopped)."""
    deadline = time.monotonic() + 5
    while (left := _brokers_threads(before)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return left


def test_stop_then_start_on_the_same_directory_reads_back_everything(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_stop_then_start(tmp_path), WAIT_S * 3))


def test_a_failed_start_releases_the_directory(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_failed_start(tmp_path), WAIT_S))


async def _stop_then_start(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    metrics_port = free_port()
    broker = await start_broker(_settings(tmp_path, metrics_port))
    try:
        await _produce(broker)
        logs, view = await _read_back(broker)  # the view folded: its worker thread ran
        assert logs == [KEYS, KEYS] and len(view) == len(KEYS)
    finally:
        await broker.stop()
    assert await _threads_left(before) == []
    assert port_free(metrics_port)

    again = await start_broker(_settings(tmp_path, metrics_port))  # before: DataDirInUse
    try:
        logs, view = await _read_back(again)
        assert logs == [KEYS, KEYS]
        assert view == {k: b"v%d" % k for k in KEYS}
    finally:
        await again.stop()
    assert await _threads_left(before) == []


async def _failed_start(tmp_path: Path) -> None:
    with socket.socket() as taken:  # the /metrics port is someone else's
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            await start_broker(_settings(tmp_path, taken.getsockname()[1]))
    broker = await start_broker(_settings(tmp_path))  # before: DataDirInUse
    await broker.stop()
