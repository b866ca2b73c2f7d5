"""The compacted view's RocksDB I/O: fold passes, the tombstone sweep, reads.

Layout in `codec.py`, decisions in `fold.py`. Every method blocks (worker
thread). Passes and sweeps of one partition must not run at the same time
(each reads the state, then writes a new one): the partition's maintainer
runs them one after the other. Writes are not fsynced: the view is derived
from the log, and its state is written in the same WriteBatch as its
entries, so a crash loses a suffix of passes, never a part of one, and the
view folds that suffix again from the log.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import rocksdict

from broker.log import codec as log_codec
from broker.log.rocks_store import RocksStore
from broker.view import codec
from broker.view.fold import account, expired_tombstones, fold_records, remove_entries
from sdk.core.pb import keybus_pb2 as pb

VIEW_FAMILY = "view"


class ViewStore:
    """Typed access to the `view` column family of the broker's database."""

    def __init__(self, store: RocksStore) -> None:
        self.log = store
        handle, reader = store.column_family(VIEW_FAMILY)
        self._handle: Any = handle
        self._reader: rocksdict.Rdict = reader

    def state(self, topic_id: int, partition: int) -> codec.ViewState:
        value = self._reader.get(codec.state_key(topic_id, partition))
        return codec.ViewState.decode(None if value is None else bytes(value))

    def iterator(self) -> rocksdict.RdictIter:
        """A fresh iterator: it reads the view as it is now until it is dropped
        (RocksDB iterators see one point in time), whatever passes run meanwhile."""
        return self._reader.iter()

    def get_entries(self, keys: list[bytes]) -> list[bytes | None]:
        """Current values of entry keys (one multi-get)."""
        if not keys:
            return []
        found: list[bytes | None] = self._reader.get(keys)  # type: ignore[arg-type, assignment]
        return found

    def fold_pass(self, topic_id: int, partition: int, end_offset: int,
                  events_max: int) -> codec.ViewState:
        """Fold the log's records from the view's position up to end_offset
        (about events_max events) into the view; returns the new state."""
        state = self.state(topic_id, partition)
        records = list(_records(self.log, topic_id, partition, state.offset_next, end_offset,
                                events_max))
        if not records:
            return state
        fold = fold_records(topic_id, partition, records, state.offset_next, state.scn)
        keys = list(fold.entries)
        values = list(fold.entries.values())
        new_state = account(state, keys, values, self.get_entries(keys), fold.offset_next,
                            fold.scn)
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, value in fold.entries.items():
            batch.put(key, value, self._handle)
        for index_key, suffix in fold.tombstones:
            batch.put(index_key, suffix, self._handle)
        batch.put(codec.state_key(topic_id, partition), new_state.encode(), self._handle)
        self.log.write(batch, sync=False)
        return new_state

    def sweep(self, topic_id: int, partition: int, cutoff_ms: int,
              entries_max: int) -> codec.ViewState:
        """Drop tombstones published before cutoff_ms (at most entries_max index
        entries per call); returns the new state."""
        state = self.state(topic_id, partition)
        stop = codec.tombstone_key(topic_id, partition, cutoff_ms, 0)
        index: list[tuple[bytes, bytes]] = []
        it = self._reader.iter()
        it.seek(codec.tombstones_prefix(topic_id, partition))
        while it.valid() and it.key() < stop and len(index) < entries_max:
            index.append((bytes(it.key()), bytes(it.value())))
            it.next()
        del it
        if not index:
            return state
        entry_prefix = codec.entries_prefix(topic_id, partition)
        current = self.get_entries([entry_prefix + suffix for _, suffix in index])
        doomed = expired_tombstones(index, current, entry_prefix)
        doomed_values = self.get_entries(doomed)
        new_state = remove_entries(state, doomed, [v or b"" for v in doomed_values])
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key in doomed:
            batch.delete(key, self._handle)
        for index_key, _ in index:
            batch.delete(index_key, self._handle)
        batch.put(codec.state_key(topic_id, partition), new_state.encode(), self._handle)
        self.log.write(batch, sync=False)
        return new_state

    def clear(self, topic_id: int, partition: int) -> codec.ViewState:
        """Drop a partition's whole view (entries, tombstone index, state): it is
        folded again from the log (a truncation cut events it held)."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.delete_range(codec.partition_prefix(topic_id, partition),
                           codec.PREFIX.pack(topic_id, partition + 1), self._handle)
        self.log.write(batch, sync=False)
        return self.state(topic_id, partition)


def _records(store: RocksStore, topic_id: int, partition: int, start: int, stop: int,
             events_max: int) -> Iterator[pb.Record]:
    """Whole stored records from `start` (a record boundary) below `stop`."""
    events = 0
    for base, value in store.records_from(topic_id, partition, start):
        if base >= stop:
            return
        header = log_codec.decode_header(value)
        if base + header.count <= start:
            continue
        yield pb.Record.FromString(log_codec.record_bytes(value))
        events += header.count
        if events >= events_max:
            return
