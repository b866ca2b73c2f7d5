"""A grpcio server process and a client process for the floor measurements.

`stream_floor.py` and `produce_floor.py` each time grpcio alone: a server in
one spawned process, a client in another (so the caller's process never
starts grpcio, and each side's CPU is its own). This runs the pair: the
server puts its port on a queue, the client gets it with the server's PID
and puts its one result on another queue; the server is stopped after.

Both run grpcio's I/O engine as Keybus does (sdk/core/grpc_engine.py: its
polling engine, unless GRPC_EXPERIMENTS is set; `GRPC_EXPERIMENTS=` measures
grpcio's default).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

from sdk.core.grpc_engine import prefer_polling_engine


def measure_pair(serve: Callable[..., None], serve_args: tuple[Any, ...],
                 client: Callable[..., None], client_args: tuple[Any, ...],
                 timeout_s: float) -> Any:
    """Spawn `serve(*serve_args, ports)`, then `client(port, server_pid, *client_args,
    results)`; return what the client put on `results` (waiting up to `timeout_s`)."""
    prefer_polling_engine(imported=())  # for the children, whatever this process imported
    context = multiprocessing.get_context("spawn")
    ports, results = context.Queue(), context.Queue()
    server = context.Process(target=serve, args=(*serve_args, ports), daemon=True)
    server.start()
    try:
        child = context.Process(target=client, daemon=True, args=(
            ports.get(timeout=30), server.pid, *client_args, results))
        child.start()
        result = results.get(timeout=timeout_s)
        child.join(10)
    finally:
        server.terminate()
        server.join(10)
    return result
