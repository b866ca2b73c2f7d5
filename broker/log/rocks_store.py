"""The RocksDB store: one database per broker, one column family per kind.

Layout is in `codec.py`. The families of subscriptions, grants and processor
stores are read and written by the base class in `rocks_state.py`. Every
method is a blocking call. RocksDB itself is thread-safe; this class keeps no
mutable state beyond the handles and the first write that failed on the disk
(`disk_failures`: after it RocksDB refuses every write until reopened, so the
broker stops; store_failure.py).

Durable writes are two steps (`write`): the WriteBatch is written without
sync, then RocksDB's write-ahead log is fsynced (`sync_wal`). rocksdict's
`write` holds the GIL for its whole call, so a synced write stops every
Python thread (the broker's event loop too, even when the write runs on a
worker thread) for the length of the fsync; `flush_wal(sync=True)` releases
the GIL. Acknowledging after `sync_wal` returns is exactly as durable as a
synced write: every write made before it is on disk. The partition task uses
the two steps itself (write on the loop, fsync on the store's `wal_syncer`
thread while the loop goes on serving); every other caller gets both in one
call.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

import rocksdict

from broker.log import codec, data_format
from broker.log.retention import HeadRecord
from broker.log.rocks_options import DEFAULT_LIMITS, StoreLimits, database_options
from broker.log.rocks_state import StateFamilies
from broker.log.store_failure import StoreFailures, is_store_failure, unreadable
from broker.log.wal_sync import StoreClosed, WalSyncer
from broker.metrics import WAL_FSYNC_SECONDS
from sdk.core.pb import keybus_pb2 as pb

COLUMN_FAMILIES = ("log", "scn_index", "producers", "partitions", "meta", "cursors",
                   "view",  # the compacted view (broker/view/codec.py)
                   "ownership", "checkpoints", "acls")


@dataclass(frozen=True, slots=True)
class Tail:
    """A partition's state recovered at start: no scan, one seek and a get."""

    start_offset: int
    next_offset: int
    last_scn: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Append:
    """One record to append: its log value and where it goes."""

    base_offset: int
    scn_first: int
    count: int
    window: bool
    value: bytes

    @classmethod
    def of_record(cls, record: pb.Record) -> Append:
        """A whole Record (its own offsets, SCN and publish time) as the log stores it."""
        count = record.batch.count
        return cls(record.base_offset, record.scn_first, count, record.window,
                   codec.encode_record(record.SerializeToString(), record.publish_time_ms,
                                       count, record.scn_first, record.window))


class RocksStore(StateFamilies):
    """Typed access to the broker's RocksDB database."""

    def __init__(self, path: str, fsync: bool, limits: StoreLimits = DEFAULT_LIMITS) -> None:
        options = database_options(limits)
        families = {name: rocksdict.Options(raw_mode=True) for name in COLUMN_FAMILIES}
        self._db = rocksdict.Rdict(path, options=options, column_families=families)
        self._cf = {name: self._db.get_column_family_handle(name) for name in COLUMN_FAMILIES}
        self._views = {name: self._db.get_column_family(name) for name in COLUMN_FAMILIES}
        self.durable = fsync  # data writes are fsynced before they count (metadata always is)
        self._unsynced = rocksdict.WriteOptions()
        self._unsynced.sync = False
        # A write or fsync that fails on the disk leaves RocksDB refusing writes until it
        # is reopened: the broker stops (store_failure.py).
        self.disk_failures = StoreFailures(path)
        self._unreadable_reported: set[str] = set()  # what a damaged block stopped (logged)
        # The partitions' group commits fsync here (wal_sync.py); looked up per call, so a
        # subclass's or a tracer's sync_wal is the one that runs.
        self.wal_syncer = WalSyncer(lambda: self.sync_wal(), observe=WAL_FSYNC_SECONDS.observe)

    def close(self) -> None:
        """Close the database and drop every handle of it, so that RocksDB's LOCK is
        released and the same directory can be opened again in this process (an
        application embedding the broker: stop, then start on the same data directory).

        Why drop them: each column family handle and reader holds rocksdict's reference
        to the database, which stays open (its LOCK held) while any of them lives, even
        after `Rdict.close`. Other modules therefore take them per call
        (`column_family`), never keep them."""
        self.wal_syncer.close()  # no fsync runs once the database closes
        views, self._views = self._views, _Closed()
        self._cf = _Closed()
        try:  # closing flushes the memtables: after a failure, refused with its error
            for view in views.values():
                view.close()
            self._db.close()
        except Exception:
            if self.disk_failures.first is None:
                raise
        finally:
            views.clear()

    # ------------------------------------------------------------ metadata

    def load_topics(self) -> list[dict[str, Any]]:
        meta = self._views["meta"]
        it = meta.iter()
        it.seek(b"topic/")
        topics = []
        while it.valid() and it.key().startswith(b"topic/"):
            topics.append(json.loads(it.value()))
            it.next()
        self.ended(it, lambda: "the topic list")
        return topics

    def save_topic(self, topic: dict[str, Any]) -> None:
        batch = self._batch()
        batch.put(b"topic/" + topic["name"].encode(), json.dumps(topic).encode(), self._cf["meta"])
        self.write(batch, sync=True)

    def next_id(self, counter: str) -> int:
        """Take the next value of a persisted counter (1, 2, ...). Sync write."""
        key = counter.encode()
        current = self._views["meta"].get(key)
        value = (codec.U64.unpack(current)[0] if current else 0) + 1
        batch = self._batch()
        batch.put(key, codec.U64.pack(value), self._cf["meta"])
        self.write(batch, sync=True)
        return int(value)

    def data_format(self) -> int | None:
        """The data directory's layout number (data_format.py; None: never written)."""
        stored = self._views["meta"].get(data_format.KEY)
        return int(codec.U64.unpack(stored)[0]) if stored else None

    def write_data_format(self, value: int) -> None:
        batch = self._batch()
        batch.put(data_format.KEY, codec.U64.pack(value), self._cf["meta"])
        self.write(batch, sync=True)

    def peek_id(self, counter: str) -> int:
        """The last value `next_id` gave for a counter (0: none yet)."""
        current = self._views["meta"].get(counter.encode())
        return int(codec.U64.unpack(current)[0]) if current else 0

    def delete_topic(self, name: str, topic_id: int, partitions: int) -> None:
        """Remove a topic's metadata and every key of its partitions, atomically."""
        batch = self._batch()
        batch.delete(b"topic/" + name.encode(), self._cf["meta"])
        start, stop = codec.PREFIX.pack(topic_id, 0), codec.PREFIX.pack(topic_id + 1, 0)
        for family in ("log", "scn_index", "producers", "partitions", "cursors", "view",
                       "ownership", "checkpoints"):
            batch.delete_range(start, stop, self._cf[family])
        self.write(batch, sync=True)

    # ------------------------------------------------------------ partitions

    def recover_tail(self, topic_id: int, partition: int) -> Tail:
        prefix = codec.prefix(topic_id, partition)
        state = self._views["partitions"].get(prefix)
        start_offset, size = codec.PARTITION_STATE.unpack(state) if state else (0, 0)
        it = self._views["log"].iter()
        it.seek_for_prev(codec.log_key(topic_id, partition, codec.OFFSET_MAX))
        self.ended(it, lambda: f"the log's last record of {self._name(topic_id, partition)}")
        if not it.valid() or not it.key().startswith(prefix):
            return Tail(start_offset, start_offset, 0, size)
        header = codec.decode_header(it.value())
        codec.record_bytes(it.value())  # verify the tail's checksum before trusting it
        base_offset = codec.offset_of_key(it.key())
        return Tail(start_offset, base_offset + header.count, header.scn_last, size)

    def append(self, topic_id: int, partition: int, appends: list[Append],
               producer_states: dict[int, bytes], start_offset: int, size: int,
               sync: bool = True) -> None:
        """Write records, their SCN index, producer state and partition state in
        one WriteBatch, fsynced when the store is durable: all or nothing.
        `sync=False`: the caller calls `sync_wal` before it counts on them."""
        batch = self._batch()
        log, scn_index = self._cf["log"], self._cf["scn_index"]
        for item in appends:
            batch.put(codec.log_key(topic_id, partition, item.base_offset), item.value, log)
            batch.put(codec.log_key(topic_id, partition, item.scn_first),
                      codec.SCN_ENTRY.pack(item.base_offset, item.count, item.window), scn_index)
        producers = self._cf["producers"]
        for producer_id, state in producer_states.items():
            batch.put(codec.log_key(topic_id, partition, producer_id), state, producers)
        batch.put(codec.prefix(topic_id, partition),
                  codec.PARTITION_STATE.pack(start_offset, size), self._cf["partitions"])
        self.write(batch, sync=sync and self.durable)

    def load_producer(self, topic_id: int, partition: int, producer_id: int) -> bytes | None:
        value = self._views["producers"].get(codec.log_key(topic_id, partition, producer_id))
        return bytes(value) if value is not None else None

    def expire_producers(self, topic_id: int, partition: int, used_before_ms: int) -> list[int]:
        """Delete the idempotence state of producers whose last batch is older
        than used_before_ms; returns their ids."""
        prefix = codec.prefix(topic_id, partition)
        it = self._views["producers"].iter()
        it.seek(prefix)
        expired: list[int] = []
        while it.valid() and it.key().startswith(prefix):
            results = codec.decode_producer_results(it.value())
            if not results or results[-1].publish_time_ms < used_before_ms:
                expired.append(codec.offset_of_key(it.key()))
            it.next()
        self.ended(it, lambda: f"the producer states of {self._name(topic_id, partition)}")
        if expired:
            batch = self._batch()
            for producer_id in expired:
                batch.delete(codec.log_key(topic_id, partition, producer_id), self._cf["producers"])
            self.write(batch, sync=self.durable)
        return expired

    def records_from(self, topic_id: int, partition: int,
                     offset: int) -> Generator[tuple[int, bytes], None, None]:
        """Yield (base_offset, value) of the record holding `offset`, then the next
        ones, in offset order. Opens a fresh iterator per call, so a reader sees
        what was written before the call. A damaged block raises `store_unreadable`
        after the records before it (never taken for the log's end: a caller that
        keeps what it read, `read_chunk` and `scan`, hands that on, and its next call
        raises)."""
        prefix = codec.prefix(topic_id, partition)
        it = self._views["log"].iter()
        it.seek_for_prev(codec.log_key(topic_id, partition, offset))
        last = -1

        def what() -> str:
            place = f"after the record at offset {last}" if last >= 0 else f"from offset {offset}"
            return f"the log of {self._name(topic_id, partition)} {place}"
        self.ended(it, what)  # the record holding `offset` damaged: no seek past it
        if not it.valid() or not it.key().startswith(prefix):
            it.seek(codec.log_key(topic_id, partition, offset))
        while it.valid():
            key = it.key()
            if not key.startswith(prefix):
                return
            last = codec.offset_of_key(key)
            yield last, it.value()
            it.next()
        self.ended(it, what)

    def offset_for_scn(self, topic_id: int, partition: int, scn: int) -> int | None:
        """The first offset whose event SCN is >= scn; None when past the end."""
        prefix = codec.prefix(topic_id, partition)
        it = self._views["scn_index"].iter()
        it.seek_for_prev(codec.log_key(topic_id, partition, scn))
        def what() -> str:
            return f"the SCN index of {self._name(topic_id, partition)}"
        self.ended(it, what)
        if it.valid() and it.key().startswith(prefix):
            scn_first = codec.offset_of_key(it.key())
            base, count, window = codec.SCN_ENTRY.unpack(it.value())
            if scn_first == scn:
                return int(base)
            if not window and scn < scn_first + count:
                return int(base + scn - scn_first)
            it.next()
        else:
            it.seek(codec.log_key(topic_id, partition, scn))
        self.ended(it, what)
        if it.valid() and it.key().startswith(prefix):
            return int(codec.SCN_ENTRY.unpack(it.value())[0])
        return None

    def trim(self, topic_id: int, partition: int, stop_offset: int, stop_scn: int,
             start_offset: int, size: int) -> None:
        """Delete whole records below stop_offset (and their SCN index entries)."""
        batch = self._batch()
        batch.delete_range(codec.log_key(topic_id, partition, 0),
                           codec.log_key(topic_id, partition, stop_offset), self._cf["log"])
        batch.delete_range(codec.log_key(topic_id, partition, 0),
                           codec.log_key(topic_id, partition, stop_scn), self._cf["scn_index"])
        batch.put(codec.prefix(topic_id, partition),
                  codec.PARTITION_STATE.pack(start_offset, size), self._cf["partitions"])
        self.write(batch, sync=self.durable)

    # ------------------------------------------------------------ relay: truncation

    def producer_states(self, topic_id: int, partition: int) -> dict[int, bytes]:
        """Every stored producer state of a partition (truncation rewrites them)."""
        prefix = codec.prefix(topic_id, partition)
        it = self._views["producers"].iter()
        it.seek(prefix)
        states: dict[int, bytes] = {}
        while it.valid() and it.key().startswith(prefix):
            states[codec.offset_of_key(it.key())] = bytes(it.value())
            it.next()
        self.ended(it, lambda: f"the producer states of {self._name(topic_id, partition)}")
        return states

    def truncate(self, topic_id: int, partition: int, offset: int, scn_stop: int,
                 producer_states: dict[int, bytes | None], start_offset: int, size: int) -> None:
        """Delete the records from `offset` on and SCN index entries from `scn_stop` on,
        rewrite producer states (None deletes one), in one synced WriteBatch: a
        follower dropping a tail its leader does not have."""
        batch = self._batch()
        stop = codec.prefix(topic_id, partition + 1)
        batch.delete_range(codec.log_key(topic_id, partition, offset), stop, self._cf["log"])
        batch.delete_range(codec.log_key(topic_id, partition, scn_stop), stop,
                           self._cf["scn_index"])
        producers = self._cf["producers"]
        for producer_id, state in producer_states.items():
            key = codec.log_key(topic_id, partition, producer_id)
            if state is None:
                batch.delete(key, producers)
            else:
                batch.put(key, state, producers)
        batch.put(codec.prefix(topic_id, partition),
                  codec.PARTITION_STATE.pack(start_offset, size), self._cf["partitions"])
        self.write(batch, sync=True)

    def sync_wal(self) -> None:
        """fsync the write-ahead log: every write made before this call is then on
        disk. Releases the GIL while the disk works (see the module docstring)."""
        try:
            self._db.flush_wal(True)
        except Exception as e:
            if not is_store_failure(e):
                raise
            raise self.disk_failures.failed(e) from e

    def _batch(self) -> rocksdict.WriteBatch:
        return rocksdict.WriteBatch(raw_mode=True)

    # ------------------------------------------------------------ families kept by other modules

    def column_family(self, name: str) -> tuple[Any, rocksdict.Rdict]:
        """The handle (for WriteBatch puts) and the reader of a column family
        whose layout another module owns (the compacted view: broker/view). Take
        them per use and do not keep them: a kept one holds the database open
        after `close` (see there). Raises StoreClosed once the store is closed."""
        return self._cf[name], self._views[name]

    def ended(self, it: Any, what: Callable[[], str]) -> None:
        """Raise `store_unreadable` when an iterator stopped on a block RocksDB could not
        read rather than at its range's end (store_failure.unreadable: why). Call it
        where an iterator may have stopped being valid; `what` names what was read."""
        if not it.valid():
            try:
                it.status()
            except Exception as e:
                raise unreadable(e, what(), self._unreadable_reported) from e

    def _name(self, topic_id: int, partition: int | None = None) -> str:
        """A topic's name (and partition) for a message (a scan: only on errors)."""
        with contextlib.suppress(Exception):  # the topic list may be what is damaged
            name = next(t["name"] for t in self.load_topics() if t.get("topic_id") == topic_id)
            return name if partition is None else f"{name}/{partition}"
        named = f"topic id {topic_id}"
        return named if partition is None else f"{named} partition {partition}"

    def write(self, batch: rocksdict.WriteBatch, sync: bool) -> None:
        """Write a WriteBatch built on `column_family` handles, fsynced if asked (two
        steps: see the module docstring)."""
        try:
            self._db.write(batch, self._unsynced)  # holds the GIL: memtable + WAL append only
        except Exception as e:
            if not is_store_failure(e):
                raise
            raise self.disk_failures.failed(e) from e
        if sync:
            self.sync_wal()


class _Closed(dict[str, Any]):
    """The families of a closed store: every lookup says the store is closed."""

    def __missing__(self, name: str) -> Any:
        raise StoreClosed(f"the store is closed: no access to its {name} family")


def head_records(store: RocksStore, topic_id: int, partition: int) -> Iterator[HeadRecord]:
    """A partition's records from the oldest, as retention needs them (headers only)."""
    for base_offset, value in store.records_from(topic_id, partition, 0):
        header = codec.decode_header(value)
        yield HeadRecord(base_offset, header.count, header.scn_first, header.publish_time_ms,
                         len(value))
