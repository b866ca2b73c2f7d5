"""The compacted view's RocksDB I/O: fold passes, the tombstone sweep, reads.

Layout in `codec.py`, decisions in `fold.py`. Every method blocks (worker
thread). Passes and sweeps of one partition must not run at the same time
(each reads the state, then writes a new one): the partition's maintainer
runs them one after the other. Writes are not fsynced: the view is derived
from the log, and a crash loses only what the log still holds.

A pass works in slices of at most `slice` records' events read, winners
encoded, keys read or puts written, and lets other threads take the GIL
between two (`_yield`); it picks each key's winner over the whole pass
first, so a hot key is still encoded and written once per pass. Records are
read as bytes: the common case is folded in C with the GIL released
(`fold_native.py`), the rest parsed and folded in Python.
rocksdict's `write` holds the GIL for its whole call, and so, until the
switch interval, does Python code (its multi-get lets the GIL go). As one
call, a pass of 10,000 events (6,300 keys) wrote for 12-48 ms, and the
broker's event loop waited that long (docs/latency.md). The entries a pass
replaces are counted from sizes remembered from earlier passes (sizes.py):
only keys not known are read. Rules that keep a
pass written in parts as safe as one WriteBatch:
1. A pass of more puts writes, with its first part, the state it will end
   with but `offset_next` and `scn` as before, marked `pass_end` (codec.py):
   its counts are computed once, from the entries before any part.
2. Its last part writes the final state (no `pass_end`).
3. RocksDB's WAL replays writes in order, so a crash leaves the first parts
   of a pass, and never a part without the log records it folded (one
   database, one WAL). The next `fold_pass` finds `pass_end` and folds the
   same records again (`_finish_pass`): the same puts, idempotent, with the
   counts already written. A log that no longer holds those records (it
   never should) makes the view start over from the log.
4. A reader between parts sees `offset_next` as before the pass; entries it
   finds at or past it are the pass's, which a snapshot leaves to its
   catch-up (snapshot.py, rule 2). The sweep waits for the pass to end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import rocksdict

from broker.config import VIEW_PASS_BYTES_MAX
from broker.log import codec as log_codec
from broker.log.rocks_store import RocksStore
from broker.view import codec
from broker.view.fold import Fold, account, expired_tombstones, fold_records, remove_entries
from broker.view.fold_native import fold_bodies
from broker.view.sizes import CAPACITY, EntrySizes, slice_starts
from sdk.core.pb import keybus_pb2 as pb

VIEW_FAMILY = "view"
SLICE = 256  # events, keys or puts between two yields: about 1 ms of the GIL

log = logging.getLogger("keybus.view")


class ViewStore:
    """Typed access to the `view` column family of the broker's database."""

    def __init__(self, store: RocksStore, slice_size: int = SLICE,
                 sizes_capacity: int = CAPACITY) -> None:
        self.log = store
        self.slice = slice_size
        self.sizes = EntrySizes(sizes_capacity, slice_size, _yield)

    # Looked up per use, never kept: a kept handle holds the database open after the
    # store closes (RocksStore.close), so the broker could not be started again on it.
    @property
    def _handle(self) -> Any:
        return self.log.column_family(VIEW_FAMILY)[0]

    @property
    def _reader(self) -> rocksdict.Rdict:
        return self.log.column_family(VIEW_FAMILY)[1]

    def state(self, topic_id: int, partition: int) -> codec.ViewState:
        value = self._reader.get(codec.state_key(topic_id, partition))
        return codec.ViewState.decode(None if value is None else bytes(value))

    def iterator(self) -> rocksdict.RdictIter:
        """A fresh iterator: it reads the view as it is now until it is dropped
        (RocksDB iterators see one point in time), whatever passes run meanwhile."""
        return self._reader.iter()

    def get_entries(self, keys: list[bytes]) -> list[bytes | None]:
        """Current values of entry keys (a multi-get per slice)."""
        found: list[bytes | None] = []
        for start in slice_starts(len(keys), self.slice, _yield):
            found += self._reader.get(keys[start:start + self.slice])  # type: ignore[arg-type]
        return found

    def fold_pass(self, topic_id: int, partition: int, end_offset: int,
                  events_max: int, bytes_max: int = VIEW_PASS_BYTES_MAX) -> codec.ViewState:
        """Fold the log's records from the view's position up to end_offset
        (about events_max events, or bytes_max bytes of records: a pass holds
        its records, their winners and its writes at once) into the view;
        returns the new state."""
        state = self.state(topic_id, partition)
        if state.load_from:  # waits for its upstream's view (load.py): the log has a gap
            return state
        if state.pass_end:
            state = self._finish_pass(topic_id, partition, state)
        fold, read = self._fold(topic_id, partition, state, end_offset, events_max, bytes_max)
        if not read:
            return state
        keys = list(fold.entries)
        values = list(fold.entries.values())
        sizes = self.sizes.sizes_of(values)
        old = self.sizes.lookup(topic_id, partition, state, keys, self.get_entries)
        new_state = account(state, keys, sizes, old, fold.offset_next, fold.scn)
        self._write_pass(topic_id, partition, state, new_state,
                         [*zip(keys, values, strict=True), *fold.tombstones])
        self.sizes.remember(topic_id, partition, new_state, keys, sizes)
        return new_state

    def _fold(self, topic_id: int, partition: int, state: codec.ViewState, end_offset: int,
              events_max: int, bytes_max: int) -> tuple[Fold, int]:
        """The fold of the log from the view's position, yielding between slices
        of records read (and of winners encoded, when folded in Python); and how
        many records it read."""
        bodies: list[bytes] = []
        events = 0
        for body, count in _records(self.log, topic_id, partition, state.offset_next,
                                    end_offset, events_max, bytes_max):
            bodies.append(body)
            events += count
            if events >= self.slice:
                _yield()
                events = 0
        fold = fold_bodies(topic_id, partition, bodies, state.offset_next, state.scn,
                           _yield, self.slice)
        return fold, len(bodies)

    def _write_pass(self, topic_id: int, partition: int, before: codec.ViewState,
                    after: codec.ViewState, puts: Sequence[tuple[bytes, bytes]]) -> None:
        """Write a pass's puts and its final state `after` (rules 1-2)."""
        state_key = codec.state_key(topic_id, partition)
        starts = range(0, max(len(puts), 1), self.slice)
        for start in starts:
            batch = rocksdict.WriteBatch(raw_mode=True)
            handle = self._handle
            for key, value in puts[start:start + self.slice]:
                batch.put(key, value, handle)
            if start == starts[-1]:
                batch.put(state_key, after.encode(), handle)
            elif start == 0:
                pending = replace(after, offset_next=before.offset_next, scn=before.scn,
                                  pass_end=after.offset_next)
                batch.put(state_key, pending.encode(), handle)
            self.log.write(batch, sync=False)
            if start != starts[-1]:
                _yield()

    def _finish_pass(self, topic_id: int, partition: int,
                     state: codec.ViewState) -> codec.ViewState:
        """Write again the whole of a pass a crash cut (rule 3); its final state."""
        fold, _ = self._fold(topic_id, partition, state, state.pass_end,  # the whole pass,
                             state.pass_end - state.offset_next, 1 << 62)  # as bounded then
        if fold.offset_next != state.pass_end:
            log.warning("view of topic id %d/%d: the log no longer holds offsets %d-%d of a "
                        "pass cut by a crash; folding the view again from the log",
                        topic_id, partition, fold.offset_next, state.pass_end)
            return self.clear(topic_id, partition)
        done = replace(state, offset_next=fold.offset_next, scn=fold.scn, pass_end=0)
        self._write_pass(topic_id, partition, state, done,
                         [*fold.entries.items(), *fold.tombstones])
        return done

    def sweep(self, topic_id: int, partition: int, cutoff_ms: int,
              entries_max: int) -> codec.ViewState:
        """Drop tombstones published before cutoff_ms (at most entries_max index
        entries per call); returns the new state."""
        state = self.state(topic_id, partition)
        if state.pass_end or state.load_from:  # rule 4; or a load under way (load.py)
            return state
        stop = codec.tombstone_key(topic_id, partition, cutoff_ms, 0)
        index: list[tuple[bytes, bytes]] = []
        it = self._reader.iter()
        it.seek(codec.tombstones_prefix(topic_id, partition))
        while it.valid() and it.key() < stop and len(index) < entries_max:
            index.append((bytes(it.key()), bytes(it.value())))
            it.next()
        self.log.ended(it, lambda: f"the view's tombstones of topic id {topic_id} "
                                   f"partition {partition}")
        del it
        if not index:
            return state
        entry_prefix = codec.entries_prefix(topic_id, partition)
        current = self.get_entries([entry_prefix + suffix for _, suffix in index])
        doomed = expired_tombstones(index, current, entry_prefix)
        doomed_values = self.get_entries(doomed)
        new_state = remove_entries(state, doomed, [v or b"" for v in doomed_values])
        batch = rocksdict.WriteBatch(raw_mode=True)
        handle = self._handle
        for key in doomed:
            batch.delete(key, handle)
        for index_key, _ in index:
            batch.delete(index_key, handle)
        batch.put(codec.state_key(topic_id, partition), new_state.encode(), handle)
        self.log.write(batch, sync=False)
        return new_state

    def gap(self, topic_id: int, partition: int) -> int:
        """The view lacks keys whose events are all below this offset; 0: it lacks none."""
        value = self._reader.get(codec.gap_key(topic_id, partition))
        return 0 if value is None else int(codec.GAP.unpack(bytes(value))[0])

    def clear(self, topic_id: int, partition: int, gap: int = 0) -> codec.ViewState:
        """Drop a partition's whole view (entries, tombstone index, state): it is
        folded again from the log (a truncation cut events it held). Its gap stays
        (a view folded again from the same log lacks the same keys), raised to
        `gap` (the log's start, when what it lacks is below it)."""
        gap = max(gap, self.gap(topic_id, partition))
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.delete_range(codec.partition_prefix(topic_id, partition),
                           codec.PREFIX.pack(topic_id, partition + 1), self._handle)
        if gap:
            batch.put(codec.gap_key(topic_id, partition), codec.GAP.pack(gap), self._handle)
        self.log.write(batch, sync=False)
        return self.state(topic_id, partition)

    def mark_for_load(self, topic_id: int, partition: int, start: int) -> codec.ViewState:
        """Drop a partition's whole view and mark it as waiting for its upstream's
        (load.py), the log now starting at `start`: one WriteBatch, so a crash
        leaves the old view or the empty marked one, never a mix."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.delete_range(codec.partition_prefix(topic_id, partition),
                           codec.PREFIX.pack(topic_id, partition + 1), self._handle)
        batch.put(codec.state_key(topic_id, partition),
                  codec.ViewState(load_from=start).encode(), self._handle)
        self.log.write(batch, sync=False)
        return self.state(topic_id, partition)

    def load_entries(self, topic_id: int, partition: int, records: Sequence[pb.Record],
                     counted: codec.ViewState) -> codec.ViewState:
        """Write the entries of snapshot records (each key once over the whole load)
        into a view marked for loading; `counted` with them counted. The stored
        state stays marked (load.py, rule 2)."""
        fold = fold_records(topic_id, partition, records, 0, 0, _yield, self.slice)
        keys, values = list(fold.entries), list(fold.entries.values())
        after = account(counted, keys, self.sizes.sizes_of(values), [None] * len(keys),
                        counted.offset_next, counted.scn)
        puts = [*fold.entries.items(), *fold.tombstones]
        for start in slice_starts(len(puts), self.slice, _yield):
            batch = rocksdict.WriteBatch(raw_mode=True)
            handle = self._handle
            for key, value in puts[start:start + self.slice]:
                batch.put(key, value, handle)
            self.log.write(batch, sync=False)
        return after

    def finish_load(self, topic_id: int, partition: int,
                    state: codec.ViewState, gap: int = 0) -> codec.ViewState:
        """Write a loaded view's final, unmarked state (load.py, rule 4), and the gap
        of the view it was loaded from (0: none)."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.put(codec.state_key(topic_id, partition), state.encode(), self._handle)
        if gap:
            batch.put(codec.gap_key(topic_id, partition), codec.GAP.pack(gap), self._handle)
        self.log.write(batch, sync=False)
        return state


def _records(store: RocksStore, topic_id: int, partition: int, start: int, stop: int,
             events_max: int, bytes_max: int) -> Iterator[tuple[bytes, int]]:
    """The serialized Record and event count of whole stored records from `start`
    (a record boundary) below `stop` (checksums checked, not parsed), until
    events_max events or bytes_max bytes (one record at least)."""
    events = size = 0
    for base, value in store.records_from(topic_id, partition, start):
        if base >= stop:
            return
        header = log_codec.decode_header(value)
        if base + header.count <= start:
            continue
        body = log_codec.record_bytes(value)
        yield body, header.count
        events += header.count
        size += len(body)
        if events >= events_max or size >= bytes_max:
            return


def _yield() -> None:
    """Let a thread waiting for the GIL (the event loop) take it now, rather
    than after the switch interval."""
    time.sleep(0)
