"""A bootstrap stream's online passed positions: on the wire and out of the SDK Reader.

Goal: an ONLINE BootstrapResponse without records that carries `passed_scn`
(the stream passed records its filter dropped whole) parses as built by the
broker; the SDK makes it an item only ONLINE; a bootstrap Reader yields it
from `items()` as a `PassedPosition`, after every batch received before it
and in stream order, keeps it in `passed`, and resumes after it; plain
iteration yields the same batches and nothing else, never an empty batch.
Method: the broker's byte builder and `items_of` on small inputs; a Reader
whose bootstrap stream is a scripted fake (the responses a broker sends).
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.read_passed import Passed
from broker.view.bootstrap import response
from sdk.bootstrap import BootstrapPosition, items_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.read_batch import PassedPosition, ReadBatch
from sdk.reader import Reader


def _resume(phase: pb.BootstrapPhase.ValueType, next_offset: int) -> pb.BootstrapResume:
    return pb.BootstrapResume(phase=phase, snapshot_offset=10, next_offset=next_offset,
                              target_offset=20)


def test_the_passed_message_parses_with_the_generated_class() -> None:
    data = response([], 40, 100, pb.ONLINE, _resume(pb.ONLINE, 40), None, Passed(38, 39))
    parsed = pb.BootstrapResponse.FromString(data)
    assert (parsed.passed_scn, parsed.passed_offset) == (38, 39)
    assert (parsed.next_offset, parsed.end_offset, parsed.phase) == (40, 100, pb.ONLINE)
    assert parsed.resume.next_offset == 40 and not parsed.records
    plain = pb.BootstrapResponse.FromString(
        response([], 40, 100, pb.ONLINE, _resume(pb.ONLINE, 40)))
    assert plain.passed_scn == plain.passed_offset == 0  # every other message says none


def test_a_passed_position_is_an_item_only_online() -> None:
    online = pb.BootstrapResponse(next_offset=40, phase=pb.ONLINE, passed_scn=38,
                                  passed_offset=39, resume=_resume(pb.ONLINE, 40))
    items = items_of(online, {"snapshot", "catchup", "online"}, BootstrapPosition())
    assert [(i.passed, i.record, i.marker) for i in items] == [((38, 39), None, None)]
    assert items[0].position == BootstrapPosition("online", 10, None, None, 40, 20)
    catchup = pb.BootstrapResponse(next_offset=15, phase=pb.CATCHUP, passed_scn=14,
                                   passed_offset=14, resume=_resume(pb.CATCHUP, 15))
    assert items_of(catchup, {"snapshot", "catchup"}, BootstrapPosition()) == []


class ScriptedStream:
    """Stands in for the bootstrap stream's RetryingCall: the responses, then the end."""

    def __init__(self, responses: list[pb.BootstrapResponse]) -> None:
        self.responses = list(responses)
        self.reconnects = 0

    async def read(self) -> pb.BootstrapResponse | None:
        return self.responses.pop(0) if self.responses else None

    def cancel(self) -> None:
        self.responses = []


def _record(base: int, count: int) -> pb.Record:
    return pb.Record(topic="t", partition=0, base_offset=base, scn_first=base + 1,
                     batch=pb.EventBatch(count=count, key_ints=range(base, base + count),
                                         values=[b"v"] * count, sources=["s"]))


def _online(next_offset: int, records: list[pb.Record] | None = None,
            marker: pb.BootstrapMarker | None = None, passed: int = 0) -> pb.BootstrapResponse:
    message = pb.BootstrapResponse(records=records or [], next_offset=next_offset,
                                   end_offset=100, phase=pb.ONLINE,
                                   resume=_resume(pb.ONLINE, next_offset))
    if marker is not None:
        message.marker.CopyFrom(marker)
    if passed:
        message.passed_scn, message.passed_offset = passed, next_offset - 1
    return message


SCRIPT = [
    pb.BootstrapResponse(records=[_record(3, 1)], phase=pb.SNAPSHOT,
                         marker=pb.BootstrapMarker(phase=pb.SNAPSHOT, snapshot_offset=10),
                         resume=BootstrapPosition("snapshot", 10, "s", 3).to_proto()),
    pb.BootstrapResponse(records=[_record(12, 2)], next_offset=14, phase=pb.CATCHUP,
                         marker=pb.BootstrapMarker(phase=pb.CATCHUP, target_offset=20),
                         resume=_resume(pb.CATCHUP, 14)),
    _online(20, marker=pb.BootstrapMarker(phase=pb.ONLINE, target_offset=20)),
    _online(22, [_record(20, 2)]),
    _online(40, passed=40),
    _online(43, [_record(40, 1), _record(41, 2)]),
    _online(100, passed=100),
]


def _reader() -> Reader:
    reader = Reader("127.0.0.1:1", "t", 0, start="bootstrap", follow=True,
                    key_filter="mod:10:[3]")
    assert reader._bootstrap is not None
    reader._bootstrap._stream = ScriptedStream(SCRIPT)  # type: ignore[assignment]
    return reader


def _describe(item: Any) -> tuple[str, int, int]:
    if isinstance(item, PassedPosition):
        return ("passed", item.scn, item.offset)
    assert isinstance(item, ReadBatch)
    if item.marker is not None:
        return (f"marker:{item.marker.phase}", 0, 0)
    assert item.count > 0
    return (f"batch:{item.phase}", item.record.base_offset, item.count)


EXPECTED = [("marker:snapshot", 0, 0), ("batch:snapshot", 3, 1), ("marker:catchup", 0, 0),
            ("batch:catchup", 12, 2), ("marker:online", 0, 0), ("batch:online", 20, 2)]


def test_items_yield_online_positions_in_stream_order() -> None:
    async def go() -> tuple[list[tuple[str, int, int]], Reader]:
        reader = _reader()
        seen = []
        async for item in reader.items():
            seen.append(_describe(item))
            if isinstance(item, PassedPosition) and item.offset == 39:
                assert reader.position is not None and reader.position.next_offset == 40
        return seen, reader

    items, reader = asyncio.run(go())
    assert items == [*EXPECTED, ("passed", 40, 39), ("batch:online", 40, 1),
                     ("batch:online", 41, 2), ("passed", 100, 99)]
    assert reader.passed == PassedPosition(0, 100, 99)
    assert reader.position == BootstrapPosition("online", 10, None, None, 100, 20)


def test_plain_iteration_of_a_bootstrap_yields_the_batches_only() -> None:
    async def go() -> tuple[list[tuple[str, int, int]], Reader]:
        reader = _reader()
        return [_describe(batch) async for batch in reader], reader

    batches, reader = asyncio.run(go())
    assert batches == [*EXPECTED, ("batch:online", 40, 1), ("batch:online", 41, 2)]
    assert reader.passed == PassedPosition(0, 100, 99)  # kept, though not yielded
