"""The SDK Reader hands out a filtered read's passed positions without inventing events.

Goal: a response without records that carries `passed_scn` (the broker passed
records the read's filter dropped whole) becomes a `PassedPosition` from
`Reader.items()`, after every batch received before it and in stream order;
plain iteration (`async for batch in reader`, which TopicReader uses) yields
the same batches and nothing else, never an empty batch; `reader.passed` and
`next_offset` follow the position; `on_tail` is called at the log end only
(a position in the middle of a catch-up is not the tail).
Method: a Reader whose stream is a scripted fake (the responses a broker
sends); no broker, no channel.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sdk.core.pb import keybus_pb2 as pb
from sdk.read_batch import PassedPosition, ReadBatch
from sdk.reader import Reader


class ScriptedStream:
    """Stands in for the Reader's RetryingCall: the given responses, then the end."""

    def __init__(self, responses: list[pb.ReadResponse]) -> None:
        self.responses = list(responses)

    async def read(self) -> pb.ReadResponse | None:
        return self.responses.pop(0) if self.responses else None

    def cancel(self) -> None:
        self.responses = []


def _record(base: int, count: int) -> pb.Record:
    return pb.Record(topic="t", partition=0, base_offset=base, scn_first=base + 1,
                     batch=pb.EventBatch(count=count, key_ints=range(base, base + count),
                                         values=[b"v"] * count))


SCRIPT = [
    pb.ReadResponse(records=[_record(0, 2)], next_offset=2, end_offset=100),
    pb.ReadResponse(next_offset=40, end_offset=100, passed_scn=40, passed_offset=39),
    pb.ReadResponse(records=[_record(40, 1), _record(41, 2)], next_offset=43, end_offset=100),
    pb.ReadResponse(next_offset=100, end_offset=100, passed_scn=100, passed_offset=99),
    pb.ReadResponse(next_offset=100, end_offset=100),  # the tail, nothing passed since
]


def _reader() -> tuple[Reader, list[int]]:
    reader = Reader("127.0.0.1:1", "t", 0, follow=True, key_filter="mod:10:[3]")
    reader._stream = ScriptedStream(SCRIPT)  # type: ignore[assignment]
    tails: list[int] = []
    reader.on_tail = tails.append
    return reader, tails


def _describe(item: Any) -> tuple[str, int, int]:
    if isinstance(item, PassedPosition):
        return ("passed", item.scn, item.offset)
    assert isinstance(item, ReadBatch) and item.count > 0
    return ("batch", item.record.base_offset, item.count)


def test_items_yield_positions_in_stream_order() -> None:
    async def go() -> tuple[list[tuple[str, int, int]], Reader, list[int]]:
        reader, tails = _reader()
        return [_describe(item) async for item in reader.items()], reader, tails

    items, reader, tails = asyncio.run(go())
    assert items == [("batch", 0, 2), ("passed", 40, 39), ("batch", 40, 1), ("batch", 41, 2),
                     ("passed", 100, 99)]
    assert reader.passed == PassedPosition(0, 100, 99) and reader.next_offset == 100
    assert tails == [100, 100]  # the position at the log end and the tail; not offset 40


def test_plain_iteration_yields_the_batches_only() -> None:
    async def go() -> list[tuple[str, int, int]]:
        reader, _ = _reader()
        return [_describe(batch) async for batch in reader]

    assert asyncio.run(go()) == [("batch", 0, 2), ("batch", 40, 1), ("batch", 41, 2)]
