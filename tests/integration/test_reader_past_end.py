"""A read from an offset past the log's end is refused; a read at the end waits.

Goal: the broker refuses a read whose start offset is past the log's end
(the end is the offset the next event gets) with OUT_OF_RANGE named
`offset_past_end`, saying what the partition holds, for a Reader and a
TopicReader alike: a reader started there would wait for the log to reach
it and skip the events stored below it unseen. `Reader.open(first_answer=True)`
(what the event processor opens a partition with) raises it at open, before
any batch is asked for; before, open did nothing for an offset start and the
refusal came only at the first iteration. A following read started exactly
at the end is the usual tail position: it opens (the broker's first answer
names the end) and reads every event stored after.
Method: a real broker process; each wait bounded.
"""

from __future__ import annotations

import asyncio

import pytest

from sdk import Admin, OffsetOutOfRange, Producer, Reader, TopicReader
from tests.support.broker_process import BrokerProcess

EVENTS = 10
WITHIN_S = 30.0  # liveness bound, not a speed claim


async def _topic(address: str, topic: str) -> None:
    async with Admin(address) as admin:
        await admin.create_topic(topic, partitions=1)
    async with await Producer.create(address, topic) as producer:
        for i in range(EVENTS):
            await producer.send(i, b"x")


def test_a_start_past_the_end_is_refused_at_open_with_its_name(broker: BrokerProcess) -> None:
    async def go() -> tuple[OffsetOutOfRange, OffsetOutOfRange]:
        await _topic(broker.address, "past-end")
        reader = Reader(broker.address, "past-end", 0, start=EVENTS + 1, follow=True)
        try:
            with pytest.raises(OffsetOutOfRange) as at_open:
                async with asyncio.timeout(WITHIN_S):
                    await reader.open(first_answer=True)
        finally:
            await reader.close()
        with pytest.raises(OffsetOutOfRange) as topic_reader:
            async with asyncio.timeout(WITHIN_S):
                async with TopicReader(broker.address, "past-end", [0], start=100) as merged:
                    [batch async for batch in merged]
        return at_open.value, topic_reader.value

    at_open, topic_reader = asyncio.run(go())
    for refused, offset in ((at_open, EVENTS + 1), (topic_reader, 100)):
        assert refused.broker_error == "offset_past_end", repr(refused)
        assert (f"start offset {offset} of past-end/0 is past the end: the partition holds "
                f"offsets 0..{EVENTS - 1}; allowed 0..{EVENTS}") in str(refused), str(refused)


@pytest.mark.parametrize("first_answer", [True, False])
def test_a_following_read_at_exactly_the_end_opens_and_reads_what_comes(
        broker: BrokerProcess, first_answer: bool) -> None:
    async def go() -> tuple[int | None, list[int]]:
        await _topic(broker.address, "at-end")
        reader = Reader(broker.address, "at-end", 0, start=EVENTS, follow=True)
        try:
            async with asyncio.timeout(WITHIN_S):
                await reader.open(first_answer=first_answer)
            positioned = reader.next_offset
            async with await Producer.create(broker.address, "at-end") as producer:
                for i in range(3):
                    await producer.send(i, b"y")
            offsets: list[int] = []
            async with asyncio.timeout(WITHIN_S):
                async for batch in reader:
                    offsets += batch.offsets
                    if len(offsets) >= 3:
                        break
        finally:
            await reader.close()
        return positioned, offsets

    positioned, offsets = asyncio.run(go())
    assert positioned == (EVENTS if first_answer else None)
    assert offsets == [EVENTS, EVENTS + 1, EVENTS + 2]
