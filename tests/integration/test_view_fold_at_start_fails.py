"""A marked compacted view whose fold from the log fails at start does not stop the broker.

Goal: a view marked to be loaded from an upstream that no upstream will load (the
broker restarted with no replication entry for its topic) is folded from the broker's
own log at start (broker/relay/view_load.py `fold_without_upstream`). When clearing it
for that fails (a store error), the broker starts all the same: Bootstrap of the
partition is refused with UNAVAILABLE naming the cause, the clear is retried with
backoff and logged once per kind of failure, and once it works Bootstrap serves every
key of the log. Before, the failure propagated out of `start_broker`: the broker did
not start, for a view it can rebuild.
Method: a real broker (`start_broker`: gRPC on 127.0.0.1, real RocksDB in a temp dir)
run twice on one directory in this process; the view is marked as a follower marks it
(`PartitionView.mark_for_load`). The failure is injected into `ViewStore.clear`, the
view's one write of that step, until the test heals it. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import cast

import grpc
import pytest

from broker.config import Settings
from broker.server import Broker, start_broker
from broker.supervision import RestartBackoff
from broker.view import service
from broker.view.codec import ViewState
from broker.view.store import ViewStore
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from tests.support.wire import int_batch

WAIT_S = 20.0
KEYS = list(range(50))
INJECTED = "injected: the view's clear failed"


class Fault:
    """Makes `ViewStore.clear` raise until healed; counts the calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.healed = False
        self._clear = ViewStore.clear

    def clear(self, views: ViewStore, topic_id: int, partition: int, gap: int = 0
              ) -> ViewState:
        self.calls += 1
        if not self.healed:
            raise OSError(5, INJECTED)
        return self._clear(views, topic_id, partition, gap)


async def _start(tmp_path: Path) -> Broker:
    return await start_broker(Settings(data_dir=str(tmp_path), port=0, fsync=False,
                                       replication={}))


def _stub(channel: grpc.aio.Channel) -> pb_grpc.KeybusAsyncStub:
    return cast("pb_grpc.KeybusAsyncStub", pb_grpc.KeybusStub(channel))


async def _write_and_mark(tmp_path: Path) -> None:
    broker = await _start(tmp_path)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
            stub = _stub(channel)
            await stub.CreateTopic(pb.CreateTopicRequest(
                topic="t", config=pb.TopicConfig(partitions=1)), timeout=WAIT_S)
            call = stub.Produce(timeout=WAIT_S)
            await call.write(pb.ProduceRequest(topic="t", batch=int_batch(KEYS)))
            await call.done_writing()
            assert [r.error_code async for r in call] == [0]
        await broker.registry.views.of("t", 0).mark_for_load(len(KEYS))
    finally:
        await broker.stop()


async def _bootstrap(port: int) -> dict[int, bytes] | grpc.aio.AioRpcError:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        latest: dict[int, bytes] = {}
        try:
            async for response in _stub(channel).Bootstrap(
                    pb.BootstrapRequest(topic="t"), timeout=WAIT_S):
                for record in response.records:
                    latest.update(zip(record.batch.key_ints, record.batch.values, strict=True))
        except grpc.aio.AioRpcError as e:
            return e
        return latest


async def _until(what: str, check: object) -> None:
    for _ in range(int(WAIT_S / 0.02)):
        if callable(check) and await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within {WAIT_S} s: {what}")


async def _scenario(tmp_path: Path, fault: Fault) -> None:
    await _write_and_mark(tmp_path)
    broker = await _start(tmp_path)  # before: raised the injected OSError
    try:
        async def failed_three_times() -> bool:
            return fault.calls >= 3
        await _until("three failed clears", failed_three_times)
        refused = await _bootstrap(broker.port)
        assert isinstance(refused, grpc.aio.AioRpcError), refused
        assert refused.code() == grpc.StatusCode.UNAVAILABLE
        assert "folded again from this broker's log" in (refused.details() or "")
        assert INJECTED in (refused.details() or "")
        fault.healed = True

        async def served() -> bool:
            return await _bootstrap(broker.port) == {k: b"v%d" % k for k in KEYS}
        await _until("Bootstrap serving every key", served)
    finally:
        await broker.stop()


def test_a_failing_start_up_fold_is_retried_and_the_broker_serves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(service, "ERROR_BACKOFF", RestartBackoff(20, 80))
    fault = Fault()
    monkeypatch.setattr(ViewStore, "clear", lambda views, topic_id, partition, gap=0:
                        fault.clear(views, topic_id, partition, gap))
    with caplog.at_level(logging.WARNING, logger="keybus.view"):
        asyncio.run(asyncio.wait_for(_scenario(tmp_path, fault), WAIT_S * 3))
    failures = [r for r in caplog.records if INJECTED in r.getMessage()]
    assert fault.calls >= 4 and len(failures) == 1, [r.getMessage() for r in failures]
    assert failures[0].levelno == logging.WARNING
