"""The store can write no more, or cannot read a block: say so, never pass it off.

Why fail-stop: RocksDB keeps the first error of a failed write or WAL fsync
(a full disk, an I/O error) and refuses every later write with it until the
database is reopened; it does not resume when space comes back (measured on a
full tmpfs enlarged under an open database: every write refused for 12 s;
closed and reopened, it read back every key written before the error and
took writes again). An fsync that failed cannot be retried into a proof
either: the OS may have dropped the pages it could not write, which is why
PostgreSQL stops on a failed fsync and Kafka takes a failed log directory
offline (and stops when it was the last). A broker that stayed up would
refuse every produce until someone noticed, so it stops: clients see it go
and say so within seconds, a supervisor or the operator starts it again
once the cause is fixed, and nothing acknowledged is lost, since each
acknowledgement followed its WAL fsync (or, with fsync off, its write into
the OS's page cache, which a process exit keeps).

`StoreFailures` is the thin shared part: the first failure, logged once as
one line, and the callbacks that stop the broker. Writes fail on the event
loop and fsyncs on the WAL syncer's thread, so it is thread-safe.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
from collections.abc import Callable

from broker.errors import BrokerError

log = logging.getLogger("keybus.store")

# RocksDB's Status::ToString prefixes: the database refuses writes after these.
STORE_FAILURE_PREFIXES = ("IO error:", "Corruption:")
EXIT_STORE_FAILED = 74  # sysexits' EX_IOERR: the broker stopped on its storage
DISK_FULL_BYTES = 1 << 20  # a disk with less free than this when a write failed is full
_NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"


def is_store_failure(error: BaseException) -> bool:
    """True for the status of a RocksDB write or fsync that failed on the disk
    (rocksdict raises a bare Exception carrying RocksDB's status text)."""
    return type(error) is Exception and str(error).startswith(STORE_FAILURE_PREFIXES)


def with_disk_state(status: str, where: str) -> str:
    """`status`, naming a full disk when RocksDB's text does not. Why: the write that
    first failed on a full disk may be one the broker did not make (a memtable flush),
    and the broker's next write then only gets 'IO error: Writer has previous error.'."""
    if _NO_SPACE in status:
        return status
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return status
    return f"{status}; {_NO_SPACE} ({free:,} bytes free)" if free < DISK_FULL_BYTES else status


def short_cause(status: str) -> str:
    """The kind of a RocksDB status without its file path, for clients:
    'IO error: No space left on device: While appending to file: /x/000004.log:
    ...' gives 'IO error: No space left on device'."""
    return ":".join(status.split(":")[:2]).strip()


class StoreFailures:
    """The first failure of a store, and who to tell (once) when it comes."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.first: str | None = None
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()

    def listen(self, callback: Callable[[str], None]) -> None:
        """Call `callback(status)` on the first failure, from the failing thread
        (at once if it came already)."""
        with self._lock:
            first = self.first
            if first is None:
                self._listeners.append(callback)
        if first is not None:
            callback(first)

    def failed(self, error: BaseException) -> BrokerError:
        """Record a store failure and return the error a client gets for it."""
        status = with_disk_state(str(error), self.where)
        with self._lock:
            first, listeners = self.first is None, self._listeners
            if first:
                self.first, self._listeners = status, []
        if first:
            log.critical("storage of %s failed (%s): the broker stores nothing more and "
                         "stops; everything it acknowledged is on disk. Fix the cause (free "
                         "space on the disk when it is full) and start it again",
                         self.where, status.replace("\n", " "))
            for callback in listeners:
                callback(status)
        return BrokerError("store_failed", cause=short_cause(status))


def unreadable(error: BaseException, what: str, reported: set[str]) -> BrokerError:
    """The error for a read that stopped on a block RocksDB could not read (its checksum
    failed: a damaged disk or file), logged once per `what` (`reported` keeps them).

    Why: an iterator that meets such a block stops being valid, as at the end of its
    range; taken for the end, a reader would wait for events that are there, a consumer
    would stall with nothing said, and a partition recovering its tail would take an
    empty log and write new events over stored ones. RocksDB does not stop writing on a
    bad read, so neither does the broker: the rest of the store serves."""
    status = str(error).replace("\n", " ")
    if what not in reported:
        reported.add(what)
        log.error("%s cannot be read (%s): the store is damaged there; restore the data "
                  "directory from a follower or a backup", what, status)
    return BrokerError("store_unreadable", what=what, cause=short_cause(status))
