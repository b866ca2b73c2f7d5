"""What a partition's task is asked to do: its queue's commands.

Each command carries the future its answer goes to, so that supervision can
answer every command a failed or stopped task held (`fail_pending`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sdk.core.pb import keybus_pb2 as pb

if TYPE_CHECKING:
    from broker.partition import Partition


def _new_future() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


@dataclass(slots=True)
class Produce:
    """A produce request, checked; `size` counts toward the group's bytes."""

    request: pb.ProduceRequest
    future: asyncio.Future[pb.ProduceResponse]
    size: int
    # Set when `submit` wrote it itself (`Partition._commit_now`): its fsync, which
    # the task waits for before its next group, as for a group of its own.
    synced: asyncio.Future[None] | None = None


@dataclass(slots=True)
class Trim:
    """A retention pass, behind the produces queued before it."""

    now_ms: int
    future: asyncio.Future[int] = field(default_factory=_new_future)


@dataclass(slots=True)
class OnTask:
    """Work another module runs on the partition task (relay appends, truncation)."""

    work: Callable[[Partition], Awaitable[Any]]
    future: asyncio.Future[Any] = field(default_factory=_new_future)
    size: int = 0


Command = Produce | Trim | OnTask
