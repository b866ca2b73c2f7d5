"""A reader opened at "latest" is positioned when open returns, and reads on.

Goal: every reader a user opens at "latest" (Reader, TopicReader, SyncReader,
SyncTopicReader) has each partition's start fixed by the broker before open()
(or `async with`, or the sync constructor) returns, as Pulsar's createReader
does: an event stored after that is read. Before, the read's stream opened
later (at the first iteration, or in a background task), the broker resolved
"latest" after the event was stored, and the reader skipped it. The broker's
read stream, once it sent that position, looks at the log again before waiting
(an event stored while it sent it is read at once). A reader at "latest"
against a closed port still fails within seconds, in one sentence.
Method: a real broker process. Each read has stop_offset one past the event it
must get, so a reader that skipped it ends at once with nothing (no wait on a
timeout). The race is made deterministic, not left to luck: the readers' Read
calls go through a channel that delays each call's start by a second (a
gRPC client interceptor), far longer than producing an event takes; and
`async with`/the sync constructors (which did not open the stream at all) are
run over many rounds. The broker's side: a broker in this process whose read
streams resume a second late after each response they send (the servicer
wrapped by the test; nothing in the broker knows).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc.aio
import pytest

from broker.log.rocks_store import RocksStore
from broker.rpc.read_servicer import ReadServicer
from sdk import (
    Producer,
    Reader,
    SyncProducer,
    SyncReader,
    SyncTopicReader,
    TopicReader,
    Unavailable,
)
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.in_process import broker_on
from tests.support.one_each import create_topic, produce_one_each
from tests.support.slow_read import READ_START_DELAY_S, SlowReadStart

PARTITIONS = 3
READ_WITHIN_S = 30.0  # liveness bound of one read, not a speed claim
# The stream sleeps READ_START_DELAY_S; a read that waits on an append that never
# comes fails at this bound.
RESUME_READ_WITHIN_S = 10.0
ROUNDS = 10


async def _values(reader: AsyncIterator[Any], within_s: float = READ_WITHIN_S) -> list[bytes]:
    async def collect() -> list[bytes]:
        return [v async for batch in reader for v in batch.values]
    return await asyncio.wait_for(collect(), within_s)


def test_topic_reader_open_fixes_latest_before_returning(shared_broker: BrokerProcess) -> None:
    address = shared_broker.address

    async def go() -> None:
        await create_topic(address, "latest-open", PARTITIONS)
        producer = await Producer.create(address, "latest-open")
        await produce_one_each(producer, b"old", PARTITIONS)  # the end is offset 1 on every partition
        channel = grpc.aio.insecure_channel(address, interceptors=[SlowReadStart()])
        reader = TopicReader(address, "latest-open", start="latest", follow=True,
                             stop_offset=2, channel=channel)
        await reader.open()
        await produce_one_each(producer, b"new", PARTITIONS)
        assert await _values(reader) == [b"new"] * PARTITIONS
        assert reader.next_offsets == dict.fromkeys(range(PARTITIONS), 2)
        await reader.close()
        await channel.close()
        await producer.close()

    asyncio.run(go())


def test_reader_open_fixes_latest_before_returning(shared_broker: BrokerProcess) -> None:
    address = shared_broker.address

    async def go() -> None:
        await create_topic(address, "latest-one", PARTITIONS)
        producer = await Producer.create(address, "latest-one")
        channel = grpc.aio.insecure_channel(address, interceptors=[SlowReadStart()])
        reader = Reader(address, "latest-one", 1, start="latest", follow=True, stop_offset=1,
                        channel=channel)
        await reader.open()
        assert reader.next_offset == 0  # the broker's word, before anything is produced
        await produce_one_each(producer, b"new", PARTITIONS)
        assert await _values(reader) == [b"new"]
        await channel.close()
        await producer.close()

    asyncio.run(go())


def test_async_with_fixes_latest_round_after_round(shared_broker: BrokerProcess) -> None:
    address = shared_broker.address

    async def go() -> None:
        await create_topic(address, "latest-rounds", PARTITIONS)
        producer = await Producer.create(address, "latest-rounds")
        for n in range(ROUNDS):  # round n: every partition ends at offset 2n
            tag = b"round %d" % n
            async with TopicReader(address, "latest-rounds", start="latest", follow=True,
                                   stop_offset=2 * n + 1) as topic_reader:
                await produce_one_each(producer, tag, PARTITIONS)
                assert await _values(topic_reader) == [tag] * PARTITIONS, f"round {n}"
            async with Reader(address, "latest-rounds", n % PARTITIONS, start="latest",
                              follow=True, stop_offset=2 * n + 2) as reader:
                await produce_one_each(producer, tag, PARTITIONS)
                assert await _values(reader) == [tag], f"round {n}"
        await producer.close()

    asyncio.run(go())


def test_sync_readers_fix_latest_in_their_constructor(shared_broker: BrokerProcess) -> None:
    address = shared_broker.address
    asyncio.run(create_topic(address, "latest-sync", PARTITIONS))
    with SyncProducer.create(address, "latest-sync") as producer:
        for n in range(ROUNDS):  # round n: every partition ends at offset 2n
            tag = b"round %d" % n
            with SyncTopicReader(address, "latest-sync", start="latest", follow=True,
                                 stop_offset=2 * n + 1) as topic_reader:
                for p in range(PARTITIONS):
                    producer.send(p, tag, partition=p).result(READ_WITHIN_S)
                assert [v for b in topic_reader for v in b.values] == [tag] * PARTITIONS, \
                    f"round {n}"
            with SyncReader(address, "latest-sync", n % PARTITIONS, start="latest",
                            follow=True, stop_offset=2 * n + 2) as reader:
                for p in range(PARTITIONS):
                    producer.send(p, tag, partition=p).result(READ_WITHIN_S)
                assert [v for b in reader for v in b.values] == [tag], f"round {n}"


def test_an_event_stored_while_the_position_is_sent_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's side of open(): its read stream, suspended while it sends the
    position, must look at the log again before it waits for the next append: the
    reader, told, may have produced meanwhile. Before, it waited for the append
    after that one, and the event was only read when another came."""
    serve = ReadServicer.Read

    async def resume_late(self: ReadServicer, request: Any, context: Any) -> AsyncIterator[Any]:
        async for message in serve(self, request, context):
            yield message
            await asyncio.sleep(READ_START_DELAY_S)  # a loaded broker resuming the stream late

    monkeypatch.setattr(ReadServicer, "Read", resume_late)

    async def go() -> None:
        async with broker_on(tmp_path, RocksStore, "resume", PARTITIONS) as (address, _):
            producer = await Producer.create(address, "resume")
            async with Reader(address, "resume", 0, start="latest", follow=True,
                              stop_offset=1) as reader:
                await produce_one_each(producer, b"new", PARTITIONS)  # while the stream sleeps
                assert await _values(reader, RESUME_READ_WITHIN_S) == [b"new"]
            await producer.close()

    asyncio.run(go())


def _refused(port: int) -> str:
    return (f"cannot reach broker at 127.0.0.1:{port}: connection refused — is it running? "
            "(keybus broker)")


async def _open_reader(address: str) -> Any:
    async with Reader(address, "t", 0, start="latest", follow=True):
        pass


async def _open_topic_reader(address: str) -> Any:
    await TopicReader(address, "t", start="latest", follow=True).open()


async def _open_partitions(address: str) -> Any:
    await TopicReader(address, "t", [0, 1], start="latest", follow=True).open()


async def _open_sync_reader(address: str) -> Any:
    await asyncio.to_thread(SyncReader, address, "t", 0, start="latest", follow=True)


async def _open_sync_topic_reader(address: str) -> Any:
    await asyncio.to_thread(SyncTopicReader, address, "t", start="latest", follow=True)


@pytest.mark.parametrize("call", [_open_reader, _open_topic_reader, _open_partitions,
                                  _open_sync_reader, _open_sync_topic_reader])
def test_latest_against_no_broker_fails_within_seconds(
        call: Callable[[str], Awaitable[Any]]) -> None:
    port = free_port()
    began = time.monotonic()
    with pytest.raises(Unavailable) as caught:
        asyncio.run(asyncio.wait_for(call(f"127.0.0.1:{port}"), 30))
    assert str(caught.value) == _refused(port)
    assert time.monotonic() - began < 8  # connect_timeout_ms is 5 s by default
