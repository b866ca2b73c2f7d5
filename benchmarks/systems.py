"""What the comparison needs to know of a system, whichever it is.

Keybus, Redis Streams and NATS JetStream each describe themselves with a
`System`: how to run a server, create and drop a stream, the producer process
and the ways to consume (a `Client` each). The scenarios then treat them alike.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.measurement import CompareWorkload
from benchmarks.runner import Worker


@dataclass(frozen=True)
class Server:
    """A running server: "127.0.0.1:PORT", its PID (for CPU), its version line."""

    address: str
    pid: int
    version: str
    metrics: str | None = None  # "127.0.0.1:PORT" of its Prometheus /metrics, when it has one


@dataclass(frozen=True)
class Client:
    """One way to consume a system end to end, e.g. "Redis consumer group".

    prepare(address, stream, workload): runs in the parent after the stream
    exists and before any client starts (create the group / durable consumer).
    consume: the consumer process's worker (see client_loops.consume*).
    consumers: how many consumer processes this client always runs (Keybus
        Exclusive admits one consumer: 1); None runs the workload's `consumers`.
    """

    label: str
    prepare: Callable[[str, str, CompareWorkload], None]
    consume: Worker
    consumers: int | None = None


@dataclass(frozen=True)
class System:
    """A system under comparison.

    durability: what an acknowledgement means on disk, stated in the results.
    pending: consume labels that are not available yet, each with the reason.
    churn: the churn scenario's row (server, workload, show progress), for a system
        whose consumers wait on each other when they come and go (Keybus Key_Shared);
        None elsewhere.
    """

    name: str
    durability: str
    server: Callable[[Path], AbstractContextManager[Server]]
    create_stream: Callable[[str, str, CompareWorkload], None]
    drop_stream: Callable[[str, str], None]
    produce: Worker
    clients: tuple[Client, ...] = ()
    pending: tuple[tuple[str, str], ...] = ()
    churn: Callable[[Server, CompareWorkload, bool], dict[str, Any]] | None = None
