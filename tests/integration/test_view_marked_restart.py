"""A marked compacted view on a broker that no upstream will load it on.

Goal: a follower's view marked to be loaded from its upstream (its copy
restarted past offsets the upstream's retention removed: broker/view/load.py)
never refuses Bootstrap for ever. Restarted still following the topic (its
upstream unreachable for now) the view keeps waiting for the load; restarted
with no replication entry for the topic, the broker folds the view from its
own log at start, with one WARNING naming the offset below which keys may be
missing, and Bootstrap serves every key the log holds. Before, the second
restart refused Bootstrap with UNAVAILABLE (view_loading) for ever.
Method: a real broker (`start_broker`: gRPC on 127.0.0.1, real RocksDB in a
temp dir), run three times on the same data directory, each run in its own
spawned process (the process's exit releases RocksDB's lock). The mark is
what the follower writes before its log restarts (`PartitionView.mark_for_load`,
called on the running broker); the "upstream" is a closed port on 127.0.0.1.
Every wait is bounded; a run that does not end in time is killed.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import traceback
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import cast

import grpc

from broker.config import Settings
from broker.server import Broker, start_broker
from keybus.dev_cluster import free_port
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from tests.support.wire import int_batch

WAIT_S = 20.0
KEYS = list(range(50))


async def _start(tmp_path: Path, replication: dict[str, dict[str, str]]) -> Broker:
    return await start_broker(Settings(
        data_dir=str(tmp_path), port=0, fsync=False, replication=replication,
        relay_retry_backoff_ms=50, relay_retry_backoff_max_ms=200))


async def _bootstrap(broker: Broker) -> dict[int, bytes] | grpc.aio.AioRpcError:
    """Key -> latest value from a Bootstrap of t/0, or the call's error."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        stub = cast("pb_grpc.KeybusAsyncStub", pb_grpc.KeybusStub(channel))
        latest: dict[int, bytes] = {}
        try:
            async for response in stub.Bootstrap(pb.BootstrapRequest(topic="t"),
                                                 timeout=WAIT_S):
                for record in response.records:
                    latest.update(zip(record.batch.key_ints, record.batch.values, strict=True))
        except grpc.aio.AioRpcError as e:
            return e
        return latest


async def _write_and_mark(tmp_path: Path) -> int:
    """A leader-less broker with t/0 holding KEYS, its view marked as a follower's
    is before its log restarts; returns the mark's offset."""
    broker = await _start(tmp_path, {})
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
            stub = cast("pb_grpc.KeybusAsyncStub", pb_grpc.KeybusStub(channel))
            await stub.CreateTopic(pb.CreateTopicRequest(
                topic="t", config=pb.TopicConfig(partitions=1)), timeout=WAIT_S)
            call = stub.Produce(timeout=WAIT_S)
            await call.write(pb.ProduceRequest(topic="t", batch=int_batch(KEYS)))
            await call.done_writing()
            responses = [r async for r in call]
            assert len(responses) == 1 and not responses[0].error_code, responses
        view = broker.registry.views.of("t", 0)
        end = broker.registry.partition("t", 0).end_offset
        assert end == len(KEYS)
        await view.mark_for_load(end)  # what the follower's view_load.hold writes
        refused = await _bootstrap(broker)
        assert isinstance(refused, grpc.aio.AioRpcError)
        assert refused.code() == grpc.StatusCode.UNAVAILABLE
        return end
    finally:
        await broker.stop()


class _Warnings(logging.Handler):
    """The WARNING lines of keybus.view, kept for the parent process."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        logging.getLogger("keybus.view").addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def _following(tmp_path: Path) -> None:
    """Restarted as a follower of the topic, its upstream away: the view waits."""
    follows = {"t": {"upstream": f"127.0.0.1:{free_port()}"}}
    broker = await _start(tmp_path, follows)
    try:
        assert broker.registry.views.of("t", 0).state.load_from == len(KEYS)
        refused = await _bootstrap(broker)
        assert isinstance(refused, grpc.aio.AioRpcError), refused
        assert refused.code() == grpc.StatusCode.UNAVAILABLE
        assert "being loaded from" in str(refused.details())
    finally:
        await broker.stop()


async def _no_role(tmp_path: Path) -> None:
    """Restarted with no replication entry for the topic: folded from its log at start."""
    broker = await _start(tmp_path, {})
    try:
        served = await _bootstrap(broker)
        for _ in range(100):  # the fold at start is the maintainer's: retried as documented
            if not (isinstance(served, grpc.aio.AioRpcError)
                    and "being folded again" in str(served.details())):
                break
            await asyncio.sleep(0.1)
            served = await _bootstrap(broker)
        assert not isinstance(served, grpc.aio.AioRpcError), served.details()
        assert served == {k: b"v" + str(k).encode() for k in KEYS}
        assert broker.registry.views.of("t", 0).state.load_from == 0
    finally:
        await broker.stop()


def _child(phase: Callable[[Path], Coroutine[None, None, object]], tmp_path: Path,
           out: multiprocessing.Queue[tuple[str, list[str]]]) -> None:
    warnings = _Warnings()
    try:
        asyncio.run(asyncio.wait_for(phase(tmp_path), WAIT_S * 2))
        out.put(("", warnings.lines))
    except BaseException:
        out.put((traceback.format_exc(limit=-2), warnings.lines))


def _run(phase: Callable[[Path], Coroutine[None, None, object]], tmp_path: Path) -> list[str]:
    """Run `phase` in a fresh process; its keybus.view WARNINGs (it must succeed)."""
    context = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[tuple[str, list[str]]] = context.Queue()
    process = context.Process(target=_child, args=(phase, tmp_path, out))
    process.start()
    try:
        failure, warnings = out.get(timeout=WAIT_S * 3)
    finally:
        process.join(WAIT_S)
        if process.is_alive():
            process.kill()
            process.join(WAIT_S)
    assert not failure, failure
    return warnings


def test_a_marked_view_with_no_upstream_to_come_is_folded_from_the_log_at_start(
        tmp_path: Path) -> None:
    _run(_write_and_mark, tmp_path)
    assert not [w for w in _run(_following, tmp_path) if "folding it" in w]
    warnings = [w for w in _run(_no_role, tmp_path) if "folding it" in w]
    assert len(warnings) == 1, warnings
    assert "neither follows nor leads" in warnings[0] and "t/0" in warnings[0]
    assert f"offset {len(KEYS)}" in warnings[0], warnings[0]
