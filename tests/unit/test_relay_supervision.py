"""The relay's own tasks survive an unexpected exception: logged, backed off, restarted.

Goal: the position reporter, which retried only gRPC errors, runs again after
any other error (its traceback logged) and reports the latest positions on a
new stream; a relay node task (a static role change) that fails is retried
with backoff until it succeeds, and meanwhile the topic refuses produce with
UNAVAILABLE naming the cause instead of staying roleless in silence.
Method: the reporter gets a small stand-in channel (through its constructor)
whose first ReportReplicaPositions call breaks with a RuntimeError and whose
next ones record what they are sent; the node runs on a real RocksDB topic
registry whose `partitions()` raises once (through the node's constructor).
Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import grpc
import grpc.aio
import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.partition import Partition
from broker.relay.backoff import Backoff
from broker.relay.node import RelayNode
from broker.relay.reporter import PositionReporter
from broker.relay.settings import RelaySettings, TopicReplication
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb

WAIT_S = 10.0


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


class BreaksOnceChannel:
    """Stands in for a grpc.aio.Channel to the upstream: the first position stream
    raises a RuntimeError (not a gRPC error); later ones record every position."""

    def __init__(self) -> None:
        self.streams = 0
        self.positions: list[pb.ReplicaPosition] = []

    def stream_stream(self, method: str, **_: Any) -> Callable[..., Any]:
        return self._report if method.endswith("/ReportReplicaPositions") else self._unused

    unary_unary = unary_stream = stream_unary = stream_stream

    def _unused(self, *_: Any, **__: Any) -> None:
        raise AssertionError("the reporter calls only ReportReplicaPositions")

    def _report(self, requests: AsyncIterator[pb.ReplicaPosition]
                ) -> AsyncIterator[pb.ReplicaPositionAck]:
        self.streams += 1
        return self._broken() if self.streams == 1 else self._acks(requests)

    async def _broken(self) -> AsyncIterator[pb.ReplicaPositionAck]:
        raise RuntimeError("injected reporter fault")
        yield pb.ReplicaPositionAck()  # an async generator

    async def _acks(self, requests: AsyncIterator[pb.ReplicaPosition]
                    ) -> AsyncIterator[pb.ReplicaPositionAck]:
        async for position in requests:
            self.positions.append(position)
            yield pb.ReplicaPositionAck()


def test_the_position_reporter_restarts_after_a_non_grpc_error(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="keybus.relay")

    async def body() -> None:
        channel = BreaksOnceChannel()
        reporter = PositionReporter(cast("grpc.aio.Channel", channel), "t", "b2",
                                    "127.0.0.1:1", Backoff(10, 50))
        reporter.report(0, 42, 3)
        reporter.start()
        try:
            await wait_until(lambda: len(channel.positions) >= 1, "a position after the fault")
            assert channel.streams == 2
            assert (channel.positions[0].partition, channel.positions[0].end_offset,
                    channel.positions[0].leader_epoch) == (0, 42, 3)
            reporter.report(1, 7, 3)  # the new stream goes on reporting
            await wait_until(lambda: len(channel.positions) >= 2, "the next position")
            assert channel.positions[1].end_offset == 7
        finally:
            await reporter.stop()

    asyncio.run(asyncio.wait_for(body(), WAIT_S * 2))
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 1 and "relay-report t failed" in tracebacks[0].getMessage()


class PartitionsFailOnce(TopicRegistry):
    """`partitions()` raises the next `failures` times."""

    failures = 0

    def partitions(self, topic: str) -> list[Partition]:
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("injected registry fault")
        return super().partitions(topic)


def test_a_failed_role_change_is_retried_and_said_meanwhile(tmp_path: Path) -> None:
    async def body() -> None:
        store = RocksStore(str(tmp_path / "db"), fsync=False)
        registry = PartitionsFailOnce(store, Settings())
        await registry.open()
        relay = RelaySettings("b", "127.0.0.1:1", "", "/keybus", 4000, 300, 1000, 1000, 1000,
                              1000, topics={"t": TopicReplication("none")})
        node = RelayNode(registry, None, relay)
        try:
            await registry.create("t", pb.TopicConfig(partitions=1))
            node.attach(relay)
            registry.failures = 1  # become_leader's first attempt fails
            await node.start()
            role = node.roles["t"]
            await wait_until(lambda: "injected registry fault" in role.detail, "the failure")
            with pytest.raises(BrokerError) as refused:
                node.check_writable("t")
            assert refused.value.code == grpc.StatusCode.UNAVAILABLE
            assert "injected registry fault" in refused.value.message
            await wait_until(lambda: role.role == "leader", "the retried role change")
            node.check_writable("t")  # takes produce now
            assert registry.partition("t", 0).leader_epoch == 0
        finally:
            await node.stop()
            await registry.close()
            store.close()

    asyncio.run(asyncio.wait_for(body(), WAIT_S * 2))
