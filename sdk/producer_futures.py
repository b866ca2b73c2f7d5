"""What a send returns: per-event and per-call futures, and a window's result.

No asyncio.Future is made per event: an EventFuture is a batch future plus an
index, as Kafka's FutureRecordMetadata is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from sdk.sender import BatchResult, ProducedEvent


@dataclass(frozen=True, slots=True)
class WindowResult:
    """Where a consistency window was stored: offsets base_offset.. + count, one SCN."""

    topic: str
    partition: int
    base_offset: int
    count: int
    scn: int
    publish_time_ms: int
    duplicate: bool = False

    @property
    def offsets(self) -> range:
        return range(self.base_offset, self.base_offset + self.count)


class EventFuture:
    """The fate of one sent event: its batch's future and its index in the batch.

    `await` it for a ProducedEvent; `result()` once `done()`. Awaiting never
    cancels the shared batch future.
    """

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: asyncio.Future[BatchResult], index: int) -> None:
        self._batch = batch
        self._index = index

    def __await__(self) -> Generator[Any, None, ProducedEvent]:
        result = yield from asyncio.shield(self._batch).__await__()
        return result.event(self._index)

    def done(self) -> bool:
        return self._batch.done()

    def result(self) -> ProducedEvent:
        """The stored event.

        Raises:
            asyncio.InvalidStateError: not done yet.
            KeybusError: the batch failed (e.g. DeliveryTimeout, InvalidArgument).
        """
        return self._batch.result().event(self._index)

    def exception(self) -> BaseException | None:
        return self._batch.exception()

    def add_done_callback(self, fn: Callable[[EventFuture], object]) -> None:
        """Call fn(self) on the event loop once the event's batch is answered."""
        self._batch.add_done_callback(lambda _: fn(self))


class BatchFuture:
    """The fate of a send_batch call: one future per request it became.

    `await` it for a list of ProducedEvent in input order (a Python object
    per event: on hot paths use `results()`).
    """

    __slots__ = ("_pieces", "count")

    def __init__(self, pieces: list[tuple[asyncio.Future[BatchResult], list[int]]],
                 count: int) -> None:
        self._pieces = pieces
        self.count = count

    def __await__(self) -> Generator[Any, None, list[ProducedEvent]]:
        for token, _ in self._pieces:
            yield from asyncio.shield(token).__await__()
        out: list[Any] = [None] * self.count
        for token, indexes in self._pieces:
            result = token.result()
            for j, i in enumerate(indexes):
                out[i] = result.event(j)
        return out

    def done(self) -> bool:
        return all(token.done() for token, _ in self._pieces)

    def results(self) -> list[tuple[list[int], BatchResult | BaseException]]:
        """Per request: the input indexes it carried and its result or error.

        A BatchResult with `duplicate` set answers a sequence the broker had
        stored already (its offsets are the original ones; `sent_batch` is
        what this request carried, to compare with the stored record).

        Raises:
            asyncio.InvalidStateError: not done yet.
        """
        return [(indexes, token.exception() or token.result()) for token, indexes in self._pieces]

    async def wait_results(self) -> list[tuple[list[int], BatchResult | BaseException]]:
        """Wait until every request is answered or failed, then `results()`.

        Unlike awaiting the BatchFuture it does not raise a request's error:
        each request's error is in its entry. Cancelling the wait cancels no request.
        """
        for token, _ in self._pieces:
            with contextlib.suppress(Exception):
                await asyncio.shield(token)
        return self.results()
