"""What a window source hands the registration loop, through a bounded inbox.

A source (the log reader or the Key_Shared consumer) runs as background
tasks that put items here; the registration loop takes them one at a time,
in order. Items: a window piece, an abort of the open streamed window, a
position the log read passed (windows with nothing for the registration), a
notice (an error worth telling the consumers that does not stop
consumption) and a failure (an error that does).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from sdk.databus.window import WindowPiece


@dataclass(frozen=True, slots=True)
class PieceItem:
    piece: WindowPiece
    closes: bool


@dataclass(frozen=True, slots=True)
class AbortItem:
    partition: int


@dataclass(frozen=True, slots=True)
class MarkerItem:
    """A partition starts or ends bootstrapping: the callback to make between windows."""

    name: str  # "on_start_bootstrap" or "on_end_bootstrap"


@dataclass(frozen=True, slots=True)
class PassedItem:
    """The log read passed windows with nothing for the registration, up to the one
    at `scn` ending at `offset` (the broker's word: runner rule 9)."""

    partition: int
    offset: int
    scn: int


@dataclass(frozen=True, slots=True)
class NoticeItem:
    error: Exception


@dataclass(frozen=True, slots=True)
class FailureItem:
    error: Exception


Item = PieceItem | AbortItem | NoticeItem | FailureItem | MarkerItem | PassedItem


class Inbox:
    """A bounded FIFO of items between source tasks and the registration loop.

    `put` waits while `items_max` items wait (back-pressure on the source);
    `get` returns None after `timeout_s` without an item, or at once after
    `wake()` (a stop request).
    """

    def __init__(self, items_max: int) -> None:
        assert items_max >= 1
        self.items_max = items_max
        self._items: deque[Item] = deque()
        self._ready = asyncio.Event()
        self._space = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    async def put(self, item: Item) -> None:
        while len(self._items) >= self.items_max:
            self._space.clear()
            await self._space.wait()
        self._items.append(item)
        self._ready.set()

    def put_failure(self, error: Exception) -> None:
        """A failure goes in even when the inbox is full (it ends consumption)."""
        self._items.append(FailureItem(error))
        self._ready.set()

    async def get(self, timeout_s: float) -> Item | None:
        if not self._items:
            self._ready.clear()
            try:
                async with asyncio.timeout(timeout_s):
                    await self._ready.wait()
            except TimeoutError:
                return None
            if not self._items:
                return None  # woken
        item = self._items.popleft()
        self._space.set()
        return item

    def wake(self) -> None:
        self._ready.set()


class WindowSource(Protocol):
    """Where a registration's windows come from (log_windows.py, share_windows.py)."""

    inbox: Inbox

    async def open(self) -> None:
        """Start the background tasks that fill the inbox."""
        ...

    def health(self, now_ms: int) -> Exception | None:
        """A notice to tell the consumers now (the broker unreachable for long), or None."""
        ...

    async def persist(self, partition: int, offset: int, scn: int,
                      position: object = None) -> None:
        """Make the checkpoint of the window at (partition, offset, scn) durable
        (`position`: where a bootstrap of the partition stands, None online)."""
        ...

    async def close(self) -> None:
        """Stop the tasks and release connections."""
        ...
