"""A reader that lost its broker does not read a topic made again meanwhile.

Goal: a following SDK Reader whose broker went away, while the topic was
deleted and created again under the same name, fails when it reconnects with
TopicRecreated (FAILED_PRECONDITION, `read_other_incarnation`, naming both
incarnations), at once and without retrying, instead of reading the new
topic from the offset it had reached in the old one (which skipped the new
topic's events below that offset and mixed two topics in one stream, silently).
A reader that lost its broker and finds the same topic resumes as before,
from its offset, and keeps the incarnation it learned from its first answer.

Method: a real broker process (RocksDB) on a temp dir. The reader reads three
events of the topic; the broker is killed with SIGKILL; a second broker
process is started on the same data directory on another port (the reader
cannot reach it), where a second client deletes the topic, creates it again and
produces five events (offsets 0..4, so the old reader's offset 3 is inside the
new log); that broker stops, and the first is started again on its port. The
same-topic case produces two more events to the topic there instead. The
event processor's reader is put through the same, with a balancing interval
longer than the test so that its next cycle cannot notice first.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sdk import Admin, Reader, TopicRecreated
from tests.support.away import WITHIN_S, change_while_away, produce, read_values
from tests.support.broker_process import BrokerProcess

TOPIC = "again"


@pytest.mark.parametrize("recreate", [True, False], ids=["recreated", "same-topic"])
def test_reader_reconnects_only_to_the_topic_it_read(tmp_path: Path, recreate: bool) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()

    async def go() -> None:
        async with Admin(broker.address) as admin:
            created = (await admin.create_topic(TOPIC, 1)).incarnation
        await produce(broker.address, TOPIC, [b"old-0", b"old-1", b"old-2"])
        said: list[tuple[bool, str]] = []
        reader = Reader(broker.address, TOPIC, 0, follow=True, retry_backoff_ms=50,
                        retry_backoff_max_ms=200,
                        on_connection_change=lambda up, text: said.append((up, text)))
        async with reader:
            assert await read_values(reader, 3) == [b"old-0", b"old-1", b"old-2"]
            assert reader.incarnation == created  # named by the broker's first answer
            await asyncio.to_thread(change_while_away, tmp_path, broker, TOPIC, recreate)
            async with Admin(broker.address) as admin:
                now = (await admin.describe_topic(TOPIC)).incarnation
            if not recreate:
                assert now == created
                assert await read_values(reader, 2) == [b"old-3", b"old-4"]
                assert reader.reconnects >= 1 and reader.incarnation == created
                return
            assert now != created
            with pytest.raises(TopicRecreated) as raised:
                got = await read_values(reader, 1)
                pytest.fail(f"the reader read the new topic from offset 3: {got}")
            error = raised.value
            assert error.broker_error == "read_other_incarnation"
            assert repr(created) in error.message and repr(now) in error.message, error.message
            assert f"this read of {TOPIC!r}/0 from offset 3" in error.message, error.message
            assert "deleted and created again" in error.message
            # the broker answered: told back before the error, not left "lost ... retrying"
            assert [up for up, _ in said] == [False, True], said
            assert said[1][1].startswith(f"the broker at {broker.address} is back"), said
        # The new topic is read with a new reader, from a start of its own.
        async with Reader(broker.address, TOPIC, 0, stop_offset=5) as fresh:
            assert [v async for batch in fresh for v in batch.values] == \
                [b"new-%d" % i for i in range(5)]

    try:
        asyncio.run(asyncio.wait_for(go(), 4 * WITHIN_S))
    finally:
        broker.stop()


def test_an_incarnation_given_is_checked_at_the_first_open(broker: BrokerProcess) -> None:
    """A caller that keeps the incarnation with its offsets (a checkpoint) gives it:
    another one is refused at once, not retried; the topic's own is read; a reader
    that gives none, as an older client, is served as before."""
    async def go() -> None:
        async with Admin(broker.address) as admin:
            created = (await admin.create_topic(TOPIC, 1)).incarnation
        await produce(broker.address, TOPIC, [b"a", b"b"])
        stale = Reader(broker.address, TOPIC, 0, start=1, follow=True,
                       incarnation="0123456789abcdef")
        with pytest.raises(TopicRecreated, match="from offset 1 is of incarnation "
                           f"'0123456789abcdef' of the topic.*now incarnation {created!r}"):
            await asyncio.wait_for(stale.open(first_answer=True), WITHIN_S)
        assert stale.reconnects == 0
        await stale.close()
        async with Reader(broker.address, TOPIC, 0, start=1, stop_offset=2,
                          incarnation=created) as given:
            assert [v async for batch in given for v in batch.values] == [b"b"]
        async with Reader(broker.address, TOPIC, 0, stop_offset=2) as plain:
            assert [v async for batch in plain for v in batch.values] == [b"a", b"b"]

    asyncio.run(asyncio.wait_for(go(), 2 * WITHIN_S))


def test_an_event_processor_reads_no_event_of_the_new_topic_on_the_old_claim(
        tmp_path: Path) -> None:
    """The processor's reader sends the topic's incarnation (its cycle's, given at
    open, and the one the broker's first answer names): its reconnect across the
    delete and create is refused (to on_error, the partition closes), where it
    handed the new topic's offsets 3 and 4 to on_event under the old claim until
    the next cycle (30 s here, past the test's waits)."""
    from sdk.processor import EventProcessor, PartitionContext
    from sdk.reader import ReadBatch
    from tests.support.processors import wait_for

    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    seen: list[tuple[str, bytes]] = []  # (the claim's incarnation, value)
    failures: list[BaseException] = []

    async def on_event(context: PartitionContext, batch: ReadBatch) -> None:
        seen.extend((context.incarnation, value) for value in batch.values)

    def on_error(context: PartitionContext | None, error: BaseException) -> None:
        failures.append(error)

    async def go() -> None:
        async with Admin(broker.address) as admin:
            created = (await admin.create_topic(TOPIC, 1)).incarnation
        await produce(broker.address, TOPIC, [b"old-0", b"old-1", b"old-2"])
        async with EventProcessor(broker.address, TOPIC, "g", on_event=on_event,
                                  on_error=on_error, load_balancing_interval_ms=30_000,
                                  ownership_expiration_ms=120_000):
            await wait_for(lambda: len(seen) == 3, WITHIN_S, "the old topic's 3 events")
            await asyncio.to_thread(change_while_away, tmp_path, broker, TOPIC, True)
            await wait_for(lambda: any(isinstance(e, TopicRecreated) for e in failures)
                           or any(v.startswith(b"new") for _, v in seen), WITHIN_S,
                           "the reader's refusal, or an event of the new topic")
        assert seen[:3] == [(created, b"old-%d" % i) for i in range(3)]
        assert not [v for incarnation, v in seen if incarnation == created
                    and v.startswith(b"new")], seen
        assert any(isinstance(e, TopicRecreated) for e in failures), failures

    try:
        asyncio.run(asyncio.wait_for(go(), 4 * WITHIN_S))
    finally:
        broker.stop()
