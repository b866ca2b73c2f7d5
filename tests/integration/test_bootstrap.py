"""Bootstrap from the compacted view after retention removed the log's head.

Goal: a reader whose start is gone from the log gets the state instead: the
snapshot plus catch-up equals a model built from the full history (latest
value per (source, key), deleted keys absent), with and without a MOD filter
applied in the broker; snapshot events carry their original offset and SCN;
the caught-up stream continues without a gap or a duplicate at the phase
changes, also while a producer writes during the snapshot.
Method: one broker process (retention checked every 50 ms); 10,000 keys
over two sources, upserts and deletes, keys 8,000..9,999 written only in the
first round so that only the view still has them once retention trimmed the
head (reading from offset 0 is refused). Then bootstraps through the SDK
Reader (start="bootstrap") with small chunks, compared with the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from sdk import Admin, OffsetOutOfRange, Producer, Reader, read_all
from sdk.channel import CHANNEL_OPTIONS, target_of
from sdk.core.filters import KeyFilterSpec, evaluate
from sdk.core.pb import keybus_pb2 as pb
from tests.support.bootstrap_model import (
    BootstrapLog,
    History,
    describe_partition,
    plan_events,
    produce_events,
    wait_for_partition,
)
from tests.support.broker_process import BrokerProcess
from tests.support.wire import stub

TOPIC = "state"
KEYS = 10_000
COLD_KEYS = 2_000  # keys written in the first round only: after retention, only in the view
MOD = "mod:10:[3]"


def _passes(filter_text: str | None, key: int) -> bool:
    if filter_text is None:
        return True
    return evaluate(KeyFilterSpec.parse_cli(filter_text), [key]).passed == [0]


def _expected(history: History, filter_text: str | None) -> dict[tuple[str, int], bytes]:
    return {k: v for k, v in history.model.items() if _passes(filter_text, k[1])}


async def _setup(broker: str, history: History) -> None:
    rng = random.Random(16)
    async with Admin(broker) as admin:
        await admin.create_topic(TOPIC, retention_bytes=600_000)
    events = plan_events(rng, KEYS, 1, 0.1, "a")
    events += plan_events(rng, KEYS - COLD_KEYS, 2, 0.1, "b")
    async with await Producer.create(broker, TOPIC) as producer:
        await produce_events(producer, events, history)
    end = history.events
    await wait_for_partition(broker, TOPIC, lambda p: p.view_offset == end
                             and p.start_offset > end // 2, "the view, then retention")


@pytest.fixture(scope="module")
def trimmed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, History]]:
    data: Path = tmp_path_factory.mktemp("bootstrap") / "data"
    broker = BrokerProcess(data, "--retention-check-interval-ms", "50")
    broker.start()
    history = History()
    try:
        asyncio.run(_setup(broker.address, history))
        yield broker, history
    finally:
        broker.stop()


async def _bootstrap(broker: str, filter_text: str | None, follow: bool = False,
                     until_offset: int | None = None, **options: object) -> BootstrapLog:
    got = BootstrapLog()
    async with Reader(broker, TOPIC, 0, start="bootstrap", key_filter=filter_text,
                      follow=follow, events_max=997, **options) as reader:  # type: ignore[arg-type]
        async for batch in reader:
            got.add(batch)
            if until_offset is not None and reader.next_offset is not None \
                    and reader.next_offset >= until_offset:
                break
    return got


@pytest.mark.parametrize("filter_text", [None, MOD])
def test_bootstrap_equals_the_model_after_retention(trimmed: tuple[BrokerProcess, History],
                                                    filter_text: str | None) -> None:
    broker, history = trimmed
    with pytest.raises(OffsetOutOfRange):
        asyncio.run(read_all(broker.address, TOPIC, 0, start=0))
    got = asyncio.run(_bootstrap(broker.address, filter_text))
    expected = _expected(history, filter_text)
    assert got.state() == expected
    assert [m.phase for m in got.markers] == ["snapshot", "catchup"]  # type: ignore[attr-defined]
    snapshot_offset = got.markers[0].snapshot_offset  # type: ignore[attr-defined]
    assert snapshot_offset == history.events and not got.log
    for event in got.snapshot:  # the original offset and SCN of each key's latest event
        assert event.offset == history.offsets[(event.source, event.key)]  # type: ignore[index]
        assert event.scn == event.offset + 1  # plain batches: scn = offset + 1 here
        assert _passes(filter_text, event.key)  # type: ignore[arg-type]
    keys = [(e.source, e.key) for e in got.snapshot]
    assert len(keys) == len(set(keys)), "a key twice in the snapshot"
    cold = {k for k in expected if k[1] >= KEYS - COLD_KEYS}
    assert cold and cold <= set(got.state()), "keys only the view still holds are missing"


def test_snapshot_without_tombstones_holds_exactly_the_live_keys(
        trimmed: tuple[BrokerProcess, History]) -> None:
    broker, history = trimmed
    got = asyncio.run(_bootstrap(broker.address, None, include_tombstones=False))
    assert {(e.source, e.key) for e in got.snapshot} == set(history.model)
    assert all(e.opcode == 0 for e in got.snapshot)


def test_sources_stream_in_the_order_asked(trimmed: tuple[BrokerProcess, History]) -> None:
    broker, history = trimmed
    got = asyncio.run(_bootstrap(broker.address, None, sources=["orders"]))
    assert {k for k in got.state()} == {k for k in history.model if k[0] == "orders"}
    both = asyncio.run(_bootstrap(broker.address, None, sources=["orders", "accounts"]))
    order = [e.source for e in both.snapshot]
    assert order == sorted(order, reverse=True)  # every "orders" event before "accounts"


@contextlib.asynccontextmanager
async def _held_channel(broker: str) -> AsyncIterator[grpc.aio.Channel]:
    """A channel whose HTTP/2 receive window stays small (8 KiB, no BDP probe).

    A reader that stops reading then holds the broker within a few batches
    of the snapshot, whatever the timing. With gRPC's default, the window
    grows to megabytes on 127.0.0.1: the broker could send the whole
    snapshot, and take its catch-up target, before the producer writes.
    """
    channel = grpc.aio.insecure_channel(target_of(broker), options=[
        *CHANNEL_OPTIONS, ("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 8192)])
    try:
        yield channel
    finally:
        await channel.close()


async def _bootstrap_while_producing(broker: str, history: History) -> list[BootstrapLog]:
    """Two bootstraps (unfiltered, MOD) read their first snapshot batch; a
    producer then writes upserts and deletes before they read on, and more
    once both are online; they follow until past the producer's last offset."""
    rng = random.Random(61)
    first_batch = [asyncio.Event(), asyncio.Event()]
    online = [asyncio.Event(), asyncio.Event()]
    produced = asyncio.Event()
    final_end: list[int] = []

    async def one(index: int, filter_text: str | None) -> BootstrapLog:
        got = BootstrapLog()
        async with _held_channel(broker) as channel, Reader(
                broker, TOPIC, 0, start="bootstrap", key_filter=filter_text, follow=True,
                events_max=500, channel=channel) as reader:
            async for batch in reader:
                got.add(batch)
                if batch.phase == "snapshot" and batch.count and not first_batch[index].is_set():
                    first_batch[index].set()
                    await asyncio.wait_for(produced.wait(), 60)
                if batch.marker is not None and batch.marker.phase == "online":
                    online[index].set()
                if final_end and (reader.next_offset or 0) >= final_end[0]:
                    return got
        raise AssertionError("the follow read ended")

    async def write() -> None:
        events = plan_events(rng, KEYS, 1, 0.2, "c")[:12_000]
        async with await Producer.create(broker, TOPIC) as producer:
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in first_batch)), 60)
            await produce_events(producer, events[:8_000], history, chunk=500)
            produced.set()
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in online)), 60)
            final_end.append(history.events + len(events) - 8_000)  # offsets are dense
            await produce_events(producer, events[8_000:], history, chunk=500)

    results = await asyncio.wait_for(asyncio.gather(one(0, None), one(1, MOD), write()), 120)
    return [results[0], results[1]]


def test_no_gap_or_duplicate_at_phase_changes_while_producing(
        trimmed: tuple[BrokerProcess, History]) -> None:
    broker, history = trimmed
    before = history.events
    logs = asyncio.run(_bootstrap_while_producing(broker.address, history))
    end = history.events
    for got, filter_text in zip(logs, [None, MOD], strict=True):
        markers = got.markers
        assert [m.phase for m in markers] == ["snapshot", "catchup", "online"]  # type: ignore[attr-defined]
        snapshot_offset = markers[0].snapshot_offset  # type: ignore[attr-defined]
        target = markers[1].target_offset  # type: ignore[attr-defined]
        assert before <= snapshot_offset < end, "the producer did not write during the snapshot"
        assert all(e.offset < snapshot_offset for e in got.snapshot)
        offsets = [e.offset for e in got.log]
        wanted = [o for o in range(snapshot_offset, end)
                  if _passes(filter_text, history.by_offset[o][1])]
        assert offsets == wanted, "gap or duplicate in the catch-up/online stream"
        assert all((phase == "catchup") == (offset < target)
                   for phase, offset in zip(got.phases, offsets, strict=True))
        assert "online" in got.phases and "catchup" in got.phases, (
            f"snapshot at {snapshot_offset}, catch-up target {target}: the broker finished "
            "the snapshot before the producer wrote")
        assert got.state() == _expected(history, filter_text)


@pytest.mark.parametrize(("fields", "code", "text"), [
    ({"topic": "nope"}, grpc.StatusCode.NOT_FOUND, "does not exist"),
    ({"sources": ["orders", "orders"]}, grpc.StatusCode.INVALID_ARGUMENT, "more than once"),
    ({"resume": pb.BootstrapResume(snapshot_offset=10**9)}, grpc.StatusCode.INVALID_ARGUMENT,
     "resume.snapshot_offset"),
    ({"resume": pb.BootstrapResume(snapshot_offset=1)}, grpc.StatusCode.OUT_OF_RANGE,
     "start the bootstrap over"),
    ({"resume": pb.BootstrapResume(phase=pb.CATCHUP, next_offset=1, target_offset=2)},
     grpc.StatusCode.OUT_OF_RANGE, "removed by retention"),
    ({"resume": pb.BootstrapResume(snapshot_offset=0, has_source=True, source="nope")},
     grpc.StatusCode.INVALID_ARGUMENT, "resume.source"),
    ({"events_max": 10**9}, grpc.StatusCode.INVALID_ARGUMENT, "events_max"),
    ({"filter": pb.KeyFilter(type=pb.KeyFilter.MOD, mod_num_buckets=0)},
     grpc.StatusCode.INVALID_ARGUMENT, "numBuckets"),
])
def test_bad_bootstrap_requests_get_a_clear_status(trimmed: tuple[BrokerProcess, History],
                                                   fields: dict[str, object],
                                                   code: grpc.StatusCode, text: str) -> None:
    broker, _ = trimmed
    request = pb.BootstrapRequest(topic=TOPIC)
    for name, value in fields.items():
        if isinstance(value, list):
            getattr(request, name).extend(value)
        elif hasattr(value, "CopyFrom"):
            getattr(request, name).CopyFrom(value)
        else:
            setattr(request, name, value)
    if request.resume.has_source:  # a snapshot point still in the log: the view's
        request.resume.snapshot_offset = asyncio.run(
            describe_partition(broker.address, TOPIC)).view_offset
    with pytest.raises(grpc.RpcError) as caught:
        list(stub(broker.address).Bootstrap(request, timeout=30))
    assert caught.value.code() == code, caught.value.details()
    assert text in (caught.value.details() or ""), caught.value.details()


def test_bootstrap_of_a_topic_without_view_is_refused(trimmed: tuple[BrokerProcess, History]) -> None:
    broker, _ = trimmed
    client = stub(broker.address)
    client.CreateTopic(pb.CreateTopicRequest(topic="plain", config=pb.TopicConfig(view=pb.VIEW_OFF)))
    with pytest.raises(grpc.RpcError) as caught:
        list(client.Bootstrap(pb.BootstrapRequest(topic="plain"), timeout=30))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "keeps no compacted view" in (caught.value.details() or "")
