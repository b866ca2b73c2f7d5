"""Goal: the store's WAL syncer acknowledges a request only after an fsync that began after
it, covers every request made during one fsync with the next, hands an fsync's error to
every request it covered, closes without leaving an fsync running or a request unanswered,
and times each fsync (the broker's keybus_wal_fsync_seconds).

Method: a fake fsync that can be held (threading events) and counts its calls; the real
thread; `wait_synced` on a real asyncio loop; a real RocksStore for the metric. Waits are
bounded.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from broker.log.rocks_store import RocksStore
from broker.log.wal_sync import Done, StoreClosed, WalSyncer, wait_synced

WAIT_S = 10


class HeldSync:
    """An fsync that counts its calls and waits for `release` on the first one."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail: Exception | None = None

    def __call__(self) -> None:
        self.calls += 1
        self.entered.set()
        assert self.release.wait(WAIT_S)
        if self.fail is not None:
            raise self.fail


def test_requests_made_during_an_fsync_share_the_next_one() -> None:
    sync = HeldSync()
    syncer = WalSyncer(sync)
    answers: list[tuple[str, Exception | None]] = []
    everyone = threading.Semaphore(0)

    def done(name: str) -> Done:
        def record(error: Exception | None) -> None:
            answers.append((name, error))
            everyone.release()
        return record

    syncer.request(done("first"))
    assert sync.entered.wait(WAIT_S)
    for name in ("a", "b", "c"):  # while the first fsync runs: it does not cover them
        syncer.request(done(name))
    assert answers == []
    sync.release.set()
    for _ in range(4):
        assert everyone.acquire(timeout=WAIT_S)
    assert answers[0] == ("first", None)
    assert sorted(answers[1:]) == [("a", None), ("b", None), ("c", None)]
    assert sync.calls == 2  # one more fsync for the three
    syncer.close()


def test_an_fsync_error_reaches_every_request_it_covered_and_close_ends_the_thread() -> None:
    sync = HeldSync()
    sync.fail = OSError("fsync failed")
    sync.release.set()
    syncer = WalSyncer(sync)

    async def scenario() -> None:
        results = await asyncio.gather(*(wait_synced(syncer) for _ in range(3)),
                                       return_exceptions=True)
        assert all(isinstance(r, OSError) and "fsync failed" in str(r) for r in results)
        sync.fail = None
        await asyncio.wait_for(wait_synced(syncer), WAIT_S)

    asyncio.run(scenario())
    syncer.close()
    assert not any(t.name == "wal-sync" and t.is_alive() for t in threading.enumerate())
    with pytest.raises(StoreClosed, match="closed"):
        syncer.request(lambda error: None)


def test_close_answers_what_was_asked_before_it() -> None:
    sync = HeldSync()
    syncer = WalSyncer(sync)
    answered = threading.Event()
    syncer.request(lambda error: answered.set())
    assert sync.entered.wait(WAIT_S)
    closing = threading.Thread(target=syncer.close)
    closing.start()
    sync.release.set()
    closing.join(WAIT_S)
    assert not closing.is_alive() and answered.is_set()


def test_each_fsync_is_timed_once_and_the_store_reports_it_to_prometheus(
        tmp_path: Path) -> None:
    observed: list[float] = []
    sync = HeldSync()
    sync.release.set()
    syncer = WalSyncer(sync, observe=observed.append)

    async def twice() -> None:
        await wait_synced(syncer)
        await asyncio.gather(wait_synced(syncer), wait_synced(syncer))

    asyncio.run(twice())
    syncer.close()
    assert len(observed) == sync.calls and all(seconds >= 0 for seconds in observed)

    store = RocksStore(str(tmp_path / "log.rocksdb"), fsync=True)
    count = "keybus_wal_fsync_seconds_count"
    before = REGISTRY.get_sample_value(count) or 0.0
    asyncio.run(wait_synced(store.wal_syncer))
    store.close()
    assert REGISTRY.get_sample_value(count) == before + 1


def test_a_failing_callback_does_not_stop_the_thread() -> None:
    sync = HeldSync()
    sync.release.set()

    def broken_observe(seconds: float) -> None:
        raise ValueError("a bad metric")

    syncer = WalSyncer(sync, observe=broken_observe)

    def broken_done(error: Exception | None) -> None:
        raise ValueError("a bad callback")

    syncer.request(broken_done)

    async def later() -> None:
        await asyncio.wait_for(wait_synced(syncer), WAIT_S)

    asyncio.run(later())  # answered: the thread outlived both failures
    syncer.close()


def test_then_runs_in_the_fsyncs_callback_and_its_error_reaches_the_waiter() -> None:
    """`then` runs on the loop outside any task (before the waiter resumes), only after a
    successful fsync; what it raises, `wait_synced` raises."""
    sync = HeldSync()
    sync.release.set()
    syncer = WalSyncer(sync)
    ran: list[object] = []

    def then() -> None:
        ran.append(asyncio.current_task())

    def failing_then() -> None:
        raise ValueError("publish failed")

    async def scenario() -> None:
        await asyncio.wait_for(wait_synced(syncer, then), WAIT_S)
        assert ran == [None]  # in the loop's callback, not the waiting task
        with pytest.raises(ValueError, match="publish failed"):
            await asyncio.wait_for(wait_synced(syncer, failing_then), WAIT_S)
        sync.fail = OSError("fsync failed")
        with pytest.raises(OSError, match="fsync failed"):
            await asyncio.wait_for(wait_synced(syncer, then), WAIT_S)
        assert ran == [None]  # not run after a failed fsync

    asyncio.run(scenario())
    syncer.close()
