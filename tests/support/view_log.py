"""A small partition log for view pass tests, and a process that dies mid-pass.

`python -m tests.support.view_log DIR PARTS` builds the log in a new RocksDB
store at DIR, folds the first pass (offsets 0-30), then starts the second
(30-120) in slices of PUTS and ends the process with `os._exit(KILLED)`
(no cleanup, no flush: as kill -9 leaves RocksDB) once PARTS writes of it
are done. It exits 1 if the pass ended first.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from broker.log.rocks_store import Append, RocksStore
from broker.view.store import ViewStore
from sdk.core.pb import keybus_pb2 as pb

PUTS = 5  # puts per part: a pass below takes several parts
FIRST_END = 30  # the first pass folds [0, 30)
LOG_END = 120
KILLED = 9


def records() -> list[pb.Record]:
    """Four records of 30 events over 45 keys, with deletes and keys seen again."""
    out = []
    for n, base in enumerate(range(0, LOG_END, 30)):
        keys = [(base + 7 * i) % 45 for i in range(30)]
        opcodes = [pb.DELETE if (i + n) % 5 == 0 else pb.UPSERT for i in range(30)]
        batch = pb.EventBatch(count=30, key_ints=keys, sources=["s"], opcodes=opcodes,
                              values=[b"v%d" % (base + i) for i in range(30)])
        out.append(pb.Record(topic="t", partition=0, base_offset=base, scn_first=base + 100,
                             publish_time_ms=1_000, batch=batch))
    return out


def new_store(path: Path) -> RocksStore:
    """A new store at `path` holding `records()` as topic id 1, partition 0."""
    store = RocksStore(str(path), fsync=False)
    store.append(1, 0, [Append.of_record(r) for r in records()], {}, 0, 0)
    return store


class CountedWrites:
    """The store's `write`, counted; at `limit` writes done, `at_limit()` runs instead."""

    def __init__(self, store: RocksStore, at_limit: Callable[[], None]) -> None:
        self.real = store.write
        self.at_limit = at_limit
        self.done = 0
        self.limit: int | None = None
        store.write = self  # type: ignore[method-assign]

    def __call__(self, batch: object, sync: bool) -> None:
        if self.done == self.limit:
            self.at_limit()
        self.done += 1
        self.real(batch, sync)  # type: ignore[arg-type]


def main(argv: list[str]) -> int:
    store = new_store(Path(argv[0]))
    views = ViewStore(store, PUTS)
    views.fold_pass(1, 0, FIRST_END, 1_000)
    writes = CountedWrites(store, lambda: os._exit(KILLED))
    writes.limit = int(argv[1])
    views.fold_pass(1, 0, LOG_END, 1_000)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
