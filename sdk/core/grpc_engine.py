"""Run grpcio's C core on its polling I/O engine, not the EventEngine one.

grpcio (1.85) serves sockets, for clients and listeners, through its
EventEngine by default: reads and writes complete on the engine's own thread
pool and are handed to the completion queue from there, one more thread hop
per message than its older polling engine (iomgr's epoll), on which the
thread that polls the completion queue does the I/O itself. For Keybus's
small messages at high rates that hop is a large share of the cost: a grpcio
asyncio server on uvloop answering one request per millisecond spends
147-155 CPU-µs per request and answers in 0.26 ms on the polling engine,
against 182-190 µs and 0.29-0.33 ms on the default, and a client reading
1,000 stream messages a second 90 CPU-µs per message against 138-147
(`python -m benchmarks.produce_floor`, `python -m benchmarks.stream_floor`;
RESULTS.md, issue 15). The broker, producers and consumers each pay it per
message.

grpcio reads its experiments (`GRPC_EXPERIMENTS`) once, when it is first
imported, and offers no call to set them, so this sets the environment
variable before that import: `sdk/__init__.py` calls it before it imports
anything else, so importing the SDK, the broker (`broker/__init__.py`
imports the SDK first) or the `keybus` package (which imports the SDK before
grpc) sets it; and only:

- when the user has not set `GRPC_EXPERIMENTS` (set it, even to the empty
  string, to keep grpcio's defaults or choose others);
- when grpc is not imported yet (it would have no effect on this process).

It stays set, so processes started from this one (the broker `keybus demo`
starts, Spark's Python workers, benchmark children) run the same engine.
Disabling an experiment by this variable is grpc's documented way back to
the previous engine; an unknown name only logs a line, so a later grpcio
that drops the polling engine still runs, on its default.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Container, MutableMapping

VARIABLE = "GRPC_EXPERIMENTS"
POLLING_ENGINE = "-event_engine_client,-event_engine_listener"


def prefer_polling_engine(environ: MutableMapping[str, str] = os.environ,
                          imported: Container[str] = sys.modules) -> bool:
    """Set GRPC_EXPERIMENTS to the polling engine unless the user chose, or grpc is
    imported already. Returns whether it set it. (The arguments are for tests.)"""
    if VARIABLE in environ or "grpc" in imported:
        return False
    environ[VARIABLE] = POLLING_ENGINE
    return True
