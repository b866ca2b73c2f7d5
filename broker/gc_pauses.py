"""The broker process and Python's garbage collector: fewer and timed pauses.

Why: a collection holds the GIL for as long as it walks its generation, and the
event loop stops for that long. A full collection walks every tracked object:
about 52,000 once a broker has started (modules, classes, protobuf descriptors,
settings), 8-15 ms each, and 0-2 of them ran in each of the latency benchmark's
6-10 s rows at 10,000 events/s.

- `freeze_startup_objects` leaves what start-up made out of every later
  collection (`gc.freeze`); garbage is collected first, since frozen objects
  are never freed.
- `PauseTimer` times every collection into `keybus_gc_pause_seconds` (by
  generation), so a stall of the loop that is the collector's shows as such.

Both are the process's, like the GIL switch interval: `serve` sets them up, an
application that embeds `start_broker` decides for its own.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from broker.metrics import GC_PAUSE_SECONDS


def freeze_startup_objects() -> None:
    """Collect what is garbage now, then freeze every object left."""
    gc.collect()
    gc.freeze()


class PauseTimer:
    """Times each collection (`gc.callbacks`, called with the GIL held on the thread that
    triggered it: one collection runs at a time)."""

    def __init__(self) -> None:
        self._began = 0.0
        self._observers = [GC_PAUSE_SECONDS.labels(str(generation)) for generation in range(3)]

    def install(self) -> None:
        gc.callbacks.append(self._on_collection)

    def uninstall(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self._observers[info["generation"]].observe(time.perf_counter() - self._began)
