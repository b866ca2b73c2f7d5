"""One thread per store that fsyncs RocksDB's write-ahead log for every partition.

A group commit writes its WriteBatch on the event loop and must not block the
loop for the fsync (see rocks_store.py), so the fsync runs on another thread.
`asyncio.to_thread` per commit did that at a cost on the latency path: a
context copy, the executor's queue and lock, two chained futures, about 80
CPU-µs and 0.1 ms per commit on a 2-core machine (RESULTS.md, issue 15), and
one pool thread per partition committing at the same time, each fsyncing the
same WAL.

`WalSyncer` keeps one thread. A request made while an fsync runs waits for
the next one, which then covers every request made meanwhile: all partitions
share the WAL, so that is a group commit across partitions. Callbacks run on
the syncer's thread; the caller hands the result to its own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

log = logging.getLogger("keybus.wal_sync")
Done = Callable[[Exception | None], None]


class StoreClosed(RuntimeError):
    """An fsync was asked of a store that is closing."""


class WalSyncer:
    """`request(done)`: fsync (`sync`) after this call, then `done(None)`, or `done(error)`
    when the fsync raised. The thread starts with the first request; `close` lets it finish
    every request made before it, then joins it. `observe` gets each fsync's seconds."""

    def __init__(self, sync: Callable[[], None], name: str = "wal-sync",
                 observe: Callable[[float], None] | None = None) -> None:
        self._sync = sync
        self._observe = observe
        self._name = name
        self._changed = threading.Condition()
        self._waiting: list[Done] = []
        self._closed = False
        self._thread: threading.Thread | None = None

    def request(self, done: Done) -> None:
        with self._changed:
            if self._closed:
                raise StoreClosed("the store is closed: no more fsyncs")
            self._waiting.append(done)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._changed.notify()

    def close(self) -> None:
        """Refuse new requests, answer the ones made, and wait for the thread to end (the
        store may be closed after this returns: no fsync is running)."""
        with self._changed:
            self._closed = True
            self._changed.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._waiting and not self._closed:
                    self._changed.wait()
                if not self._waiting:
                    return
                round_, self._waiting = self._waiting, []
            error: Exception | None = None
            began = time.perf_counter()
            try:
                self._sync()
            except Exception as e:  # every request of the round gets it (supervision decides)
                error = e
            # Nothing a callback does may end this thread: every later request would wait.
            with _logged("timing an fsync"):
                if self._observe is not None:
                    self._observe(time.perf_counter() - began)
            for done in round_:
                with _logged("answering an fsync request"):
                    done(error)


def request_synced(syncer: WalSyncer, then: Callable[[], None] | None = None
                   ) -> asyncio.Future[None]:
    """Request an fsync now; the future, on the running loop, resolves once it is
    done (raises what the fsync raised; StoreClosed when the store is closing).

    `then` runs once the fsync succeeded, on the loop, in the callback that learns it:
    before any task waiting on the future resumes, which runs only after whatever
    the loop had queued meanwhile (about 0.1 ms of grpcio's completions on a busy
    broker). What it raises, the future raises. Not run when the fsync failed or
    the future was cancelled (a waiting task cancelled)."""
    loop = asyncio.get_running_loop()
    synced: asyncio.Future[None] = loop.create_future()

    def done(error: Exception | None) -> None:
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, synced, error, then)

    syncer.request(done)
    return synced


async def wait_synced(syncer: WalSyncer, then: Callable[[], None] | None = None) -> None:
    """Request an fsync and wait for it (`request_synced`)."""
    await request_synced(syncer, then)


@contextlib.contextmanager
def _logged(what: str) -> Iterator[None]:
    try:
        yield
    except Exception:
        log.exception("WAL syncer: %s failed; going on", what)


def _settle(synced: asyncio.Future[None], error: Exception | None,
            then: Callable[[], None] | None) -> None:
    if synced.done():  # the waiter was cancelled (the partition stopping)
        return
    if error is None and then is not None:
        try:
            then()
        except Exception as e:  # the waiter raises it (supervision decides)
            error = e
    if error is None:
        synced.set_result(None)
    else:
        synced.set_exception(error)
