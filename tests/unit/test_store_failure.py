"""The store's fail-stop rules (broker/log/store_failure.py) and RocksStore's use of them.

A real RocksDB in a temp dir; the failure itself is RocksDB's status text raised by a
stand-in for the database handle (a full disk under a real broker:
tests/integration/test_store_full.py).
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.log.store_failure import (
    StoreFailures,
    is_store_failure,
    short_cause,
    with_disk_state,
)

NO_SPACE = ("IO error: No space left on device: While appending to file: "
            "/data/log.rocksdb/000004.log: No space left on device")


@pytest.mark.parametrize(("error", "failed"), [
    (Exception(NO_SPACE), True),
    (Exception("IO error: Writer has previous error."), True),
    (Exception("Corruption: block checksum mismatch"), True),
    (Exception("Invalid argument: Column family not found"), False),
    (OSError("IO error: from the OS, not from RocksDB"), False),  # not rocksdict's bare Exception
    (ValueError("IO error: a value"), False),
])
def test_only_rocksdb_write_failures_count(error: BaseException, failed: bool) -> None:
    assert is_store_failure(error) is failed


def test_clients_get_the_kind_of_failure_without_the_servers_paths() -> None:
    assert short_cause(NO_SPACE) == "IO error: No space left on device"
    assert short_cause("IO error: Writer has previous error.") == \
        "IO error: Writer has previous error."


def test_the_first_failure_is_told_once_to_every_listener() -> None:
    failures = StoreFailures("/data/log.rocksdb")
    heard: list[str] = []
    failures.listen(heard.append)
    failures.listen(lambda status: heard.append("second:" + status))
    first = failures.failed(Exception(NO_SPACE))
    again = failures.failed(Exception("IO error: Writer has previous error."))
    assert heard == [NO_SPACE, "second:" + NO_SPACE]
    assert failures.first == NO_SPACE
    for error in (first, again):
        assert isinstance(error, BrokerError) and error.kind.name == "store_failed"
        assert error.code.name == "UNAVAILABLE" and "/data" not in error.message
    late: list[str] = []
    failures.listen(late.append)  # after the failure: told at once
    assert late == [NO_SPACE]


def test_failures_from_many_threads_tell_each_listener_once() -> None:
    failures = StoreFailures("/data/log.rocksdb")
    heard: list[str] = []
    failures.listen(heard.append)
    threads = [threading.Thread(target=failures.failed, args=(Exception(f"IO error: {i}"),))
               for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(heard) == 1 and heard[0] == failures.first


class _RefusingDb:
    """A database handle whose writes and fsyncs fail as RocksDB's do on a full disk."""

    def __init__(self, real: Any, status: str) -> None:
        self.real, self.status = real, status

    def write(self, *_: Any) -> None:
        raise Exception(self.status)

    def flush_wal(self, *_: Any) -> None:
        raise Exception(self.status)

    def close(self) -> None:
        self.real.close()
        raise Exception("IO error: Writer has previous error.")


def test_a_refused_write_becomes_the_store_failure(tmp_path: Path) -> None:
    store = RocksStore(str(tmp_path / "db"), fsync=True)
    heard: list[str] = []
    store.disk_failures.listen(heard.append)
    store._db = _RefusingDb(store._db, NO_SPACE)  # type: ignore[assignment]
    with pytest.raises(BrokerError) as refused:
        store.put_many([("meta", b"k", b"v")], durable=True)
    assert refused.value.kind.name == "store_failed"
    with pytest.raises(BrokerError):
        store.sync_wal()
    assert heard == [NO_SPACE]
    store.close()  # the handle's own error on close is expected once the store failed


def test_other_errors_pass_through_and_close_still_raises(tmp_path: Path) -> None:
    store = RocksStore(str(tmp_path / "db"), fsync=True)
    real = store._db
    store._db = _RefusingDb(real, "Invalid argument: a bug of ours")  # type: ignore[assignment]
    with pytest.raises(Exception, match="Invalid argument") as raised:
        store.put_many([("meta", b"k", b"v")], durable=True)
    assert type(raised.value) is Exception and store.disk_failures.first is None
    with pytest.raises(Exception, match="Writer has previous error"):
        store.close()  # no store failure recorded: a failed close is not hidden


def test_a_full_disk_is_named_when_rocksdb_says_only_previous_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    previous = "IO error: Writer has previous error."
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda where: usage._replace(free=4096))
    assert with_disk_state(previous, str(tmp_path)) == \
        f"{previous}; No space left on device (4,096 bytes free)"
    full = "IO error: No space left on device: While appending to file: x/000004.log"
    assert with_disk_state(full, str(tmp_path)) == full  # named already
    monkeypatch.setattr(shutil, "disk_usage", lambda where: usage._replace(free=10 << 20))
    assert with_disk_state(previous, str(tmp_path)) == previous  # room left: another cause

    def gone(where: str) -> None:
        raise FileNotFoundError(where)
    monkeypatch.setattr(shutil, "disk_usage", gone)
    assert with_disk_state(previous, str(tmp_path)) == previous
