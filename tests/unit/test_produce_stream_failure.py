"""Goal: a Produce stream whose request handling raises something unexpected ends with that
error; it never leaves the stream waiting for an answer that will not come (the pump
queues each answer's place before it submits the request).

Method: the real ProduceServicer with small fakes for the registry (its partition lookup
raises) and the store; the stream's generator is driven by hand, every wait bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from broker.rpc.produce_servicer import ProduceServicer
from sdk.core.pb import keybus_pb2 as pb

WAIT_S = 5.0


class BrokenRegistry:
    def partition(self, topic: str, index: int) -> Any:
        raise RuntimeError("registry bug")


class Store:
    def peek_id(self, name: str) -> int:
        return 0


async def one_request() -> AsyncIterator[pb.ProduceRequest]:
    yield pb.ProduceRequest(topic="t", partition=0)


def test_an_unexpected_error_ends_the_stream_instead_of_leaving_it_waiting() -> None:
    async def run() -> None:
        servicer = ProduceServicer(cast(Any, BrokenRegistry()), cast(Any, Store()),
                                   in_flight_max=4)
        answers = servicer.Produce(one_request(), cast(Any, None))
        first = asyncio.ensure_future(anext(answers))
        done, _ = await asyncio.wait({first}, timeout=WAIT_S)
        assert first in done, "the stream waits for an answer that will not come"
        with pytest.raises(RuntimeError, match="registry bug"):
            first.result()

    asyncio.run(run())
