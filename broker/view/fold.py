"""Fold log records into view entries: the latest event per (source, key). Pure.

Rules:
1. Records come in offset order; a later event of a key replaces an earlier
   one, so within one pass only the last event of each key is encoded and
   written (a hot key costs one put per pass, not one per event).
2. A DELETE becomes a tombstone entry (kept, with its value if it has one)
   and a tombstone index entry, so the sweep can drop it after
   delete_retention_ms (`expired_tombstones`).
3. The new state counts keys, tombstones and bytes from the sizes of the
   entries each put replaces (`account`): the caller knows them from its
   earlier passes or reads them (sizes.py).

Cost per event: a few list extends (int keys, one source per record: the
winners come from one numpy sort over the pass) or one entry key and one
dict store (other keys); per key that wins: a slice of the heads numpy
encodes for the whole pass (per record when a record carries ordering keys,
schemas, headers or per-event offsets, SCNs or publish times) and one
concatenation with the value. No I/O, clock or randomness here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, compress
from typing import Any

import numpy as np
import numpy.typing as npt

from broker.view import codec
from broker.view.sizes import split_sum
from sdk.core.columns import batch_slots, expand, keys_of
from sdk.core.pb import keybus_pb2 as pb


class _Columns:
    """One record's columns, to encode the entries of its events that win."""

    __slots__ = ("batch", "count", "positions", "record", "winners")

    def __init__(self, record: pb.Record) -> None:
        self.record = record
        self.batch = record.batch
        self.count = self.batch.count
        self.winners: list[bytes] = []  # entry keys of the events that win, and their
        self.positions: list[int] = []  # positions in the record, in the same order

    def column(self, values: Sequence[int], at: npt.NDArray[np.int64],
               dtype: type[np.generic]) -> npt.ArrayLike:
        """A broadcast column at the winners' positions: a scalar when it has
        0 or 1 entries, else one numpy gather (no Python list per event)."""
        if len(values) <= 1:
            return values[0] if values else 0
        return np.asarray(values, dtype)[at]

    def has_deletes(self) -> bool:
        return pb.DELETE in self.batch.opcodes

    def plain(self) -> bool:
        """Every head field is the record's own or a column of 0, 1 or count
        entries, and no event has an ordering key, schema or headers: the
        whole pass's heads can then be encoded at once (`_add_pass_winners`)."""
        record, batch = self.record, self.batch
        return not (record.offsets or record.scns or record.publish_times_ms
                    or batch.ordering_keys or batch.schemas or batch.headers) \
            and len(batch.slots) in (1, self.count)

    def encode(self) -> list[bytes]:
        """The entry value of every winner: heads in one numpy pass, then one
        concatenation per winner (plus its ordering key, schema, headers)."""
        record, batch, positions = self.record, self.batch, self.positions
        if not positions:
            return []
        at = np.asarray(positions, np.int64)
        if record.offsets:
            offsets: npt.ArrayLike = np.asarray(record.offsets, np.uint64)[at]
        else:
            offsets = at + record.base_offset
        if record.scns:
            scns: npt.ArrayLike = np.asarray(record.scns, np.uint64)[at]
        else:
            scns = _event_scns(np.asarray(offsets, np.int64), record.scn_first,
                               record.base_offset, record.window)
        slots = (self.column(batch.slots, at, np.uint16) if len(batch.slots) in (1, self.count)
                 else np.asarray(batch_slots(batch), np.uint16)[at])
        extras = self._extras(positions)
        heads = codec.encode_heads(
            len(positions), offset=offsets, scn=scns,
            publish_time_ms=self.column(record.publish_times_ms, at, np.int64)
            if record.publish_times_ms else record.publish_time_ms,
            event_time_ms=self.column(batch.event_times_ms, at, np.int64), slot=slots,
            opcode=self.column(batch.opcodes, at, np.uint8), **(extras[0] if extras else {}))
        size, values = codec.ENTRY_HEAD.size, batch.values
        if extras is None:
            return [heads[j:j + size] + values[i]
                    for j, i in zip(range(0, len(heads), size), positions, strict=True)]
        tails = extras[1]
        return [heads[j:j + size] + tails[n] + values[i]
                for n, (j, i) in enumerate(zip(range(0, len(heads), size), positions,
                                               strict=True))]

    def _extras(self, positions: list[int]) -> tuple[dict[str, Any], list[bytes]] | None:
        """Lengths and bytes of ordering keys, schemas and headers (None: all empty)."""
        batch, count = self.batch, self.count
        if not (batch.ordering_keys or batch.schemas or batch.headers):
            return None
        ordering = [expand(batch.ordering_keys, count, "")[i].encode() for i in positions]
        schemas = [expand(batch.schemas, count, "")[i].encode() for i in positions]
        headers_column = expand(batch.headers, count, pb.Headers())
        headers = [headers_column[i].SerializeToString() for i in positions]
        lengths = {"ordering_length": [len(b) for b in ordering],
                   "schema_length": [len(b) for b in schemas],
                   "headers_length": [len(b) for b in headers]}
        return lengths, [o + s + h for o, s, h in zip(ordering, schemas, headers, strict=True)]


@dataclass(slots=True)
class Fold:
    """What one pass writes: entries, tombstone index entries, the new position."""

    entries: dict[bytes, bytes] = field(default_factory=dict)  # entry key -> value
    tombstones: list[tuple[bytes, bytes]] = field(default_factory=list)  # index key -> suffix
    offset_next: int = 0
    scn: int = 0
    events: int = 0


def entry_keys(prefix: bytes, batch: pb.EventBatch) -> list[bytes]:
    """The view key of every event of a batch (prefix = P | b"e")."""
    count = batch.count
    sources = batch.sources
    if len(sources) <= 1:
        head = prefix + codec.source_part(sources[0] if sources else "")
        if not batch.key_strings:
            int_head = head + codec.INT_TAG
            pack, sign = codec.INT_KEY.pack, codec.SIGN_BIT
            return [int_head + pack(k + sign) for k in batch.key_ints]
        return [head + codec.key_part(k) for k in keys_of(batch)]
    heads = {s: prefix + codec.source_part(s) for s in set(sources)}
    keys = keys_of(batch)
    return [heads[sources[i]] + codec.key_part(keys[i]) for i in range(count)]


def fold_records(topic_id: int, partition: int, records: Iterable[pb.Record],
                 offset_next: int, scn: int, pause: Callable[[], None] | None = None,
                 pause_every: int = 0) -> Fold:
    """Fold records (offset order, from `offset_next`) into the latest entry per key.

    Every event gets a number in the pass; the last number of each key wins
    (`_winners`), and numpy groups the winners back by record for encoding.

    Args:
        offset_next, scn: the view's position before these records.
        pause, pause_every: called once `pause_every` winners were encoded
            since the last call: between two records, or, when every record
            is plain (`_Columns.plain`), between two slices of that many
            winners (the caller lets other threads run: store.py). The
            winners are chosen over all records first, so a key is encoded
            once however often the fold pauses.
    Returns:
        The entries to put, tombstone index entries for the DELETE entries
        among them, and the position after the last record.
    """
    prefix = codec.entries_prefix(topic_id, partition)
    fold = Fold(offset_next=offset_next, scn=scn)
    folded = [_Columns(r) for r in records if r.batch.count]
    if not folded:
        return fold
    starts = np.cumsum([0] + [c.count for c in folded])
    fold.events = int(starts[-1])
    fold.offset_next = max(offset_next, max(_end_of(c.record) for c in folded))
    fold.scn = max(scn, max(_scn_last(c.record) for c in folded))
    keys, numbers = _winners(prefix, folded, starts)
    order = np.argsort(numbers, kind="stable")
    numbers = numbers[order]
    if all(c.plain() for c in folded):
        _add_pass_winners(fold, folded, starts, [keys[i] for i in order.tolist()], numbers,
                          topic_id, partition, len(prefix), pause, pause_every)
        return fold
    bounds = np.searchsorted(numbers, starts)
    encoded = 0
    for r, columns in enumerate(folded):
        first, last = int(bounds[r]), int(bounds[r + 1])
        columns.positions = (numbers[first:last] - starts[r]).tolist()
        columns.winners = [keys[i] for i in order[first:last].tolist()]
        _add_winners(fold, columns, topic_id, partition, len(prefix))
        encoded += last - first
        if pause is not None and encoded >= pause_every:
            pause()
            encoded = 0
    return fold


def _winners(prefix: bytes, folded: list[_Columns],
             starts: npt.NDArray[np.int64]) -> tuple[list[bytes], npt.NDArray[np.int64]]:
    """The entry key and event number of every key's last event in the pass.

    When every record has int keys and one source (the common case), keys
    are deduplicated with one numpy sort and only the winners' entry keys
    are built; otherwise one dict maps every event's entry key to its number.
    """
    batches = [c.batch for c in folded]
    if all(len(b.sources) <= 1 and not b.key_strings for b in batches):
        return _int_winners(prefix, batches)
    latest: dict[bytes, int] = {}
    for batch, first in zip(batches, starts.tolist(), strict=False):
        latest.update(zip(entry_keys(prefix, batch), range(first, first + batch.count),
                          strict=True))
    return list(latest), np.fromiter(latest.values(), np.int64, len(latest))


def _int_winners(prefix: bytes, batches: list[pb.EventBatch]
                 ) -> tuple[list[bytes], npt.NDArray[np.int64]]:
    heads: dict[str, int] = {}
    source_ids = np.repeat(  # one numpy call per pass, not one per record
        np.asarray([heads.setdefault(b.sources[0] if b.sources else "", len(heads))
                    for b in batches], np.int64), [b.count for b in batches])
    keys = np.fromiter(chain.from_iterable(b.key_ints for b in batches), np.int64,
                       len(source_ids))
    if len(heads) == 1:  # one source: the last occurrence of each key, by one stable sort
        _, first = np.unique(keys[::-1], return_index=True)
        chosen = len(keys) - 1 - first
    else:
        numbers = np.arange(len(keys), dtype=np.int64)
        order = np.lexsort((numbers, keys, source_ids))  # by source, key, then number
        last = np.ones(len(order), bool)  # the last of each (source, key) run
        last[:-1] = (keys[order][1:] != keys[order][:-1]) | (
            source_ids[order][1:] != source_ids[order][:-1])
        chosen = order[last]
    encoded = (keys[chosen].astype(np.uint64) ^ np.uint64(codec.SIGN_BIT)).astype(">u8").tobytes()
    source_heads = {i: prefix + codec.source_part(s) + codec.INT_TAG for s, i in heads.items()}
    key_heads = [source_heads[i] for i in source_ids[chosen].tolist()]
    entry = [head + encoded[j:j + 8] for head, j in zip(key_heads, range(0, len(encoded), 8),
                                                        strict=True)]
    return entry, chosen.astype(np.int64)


def _add_pass_winners(fold: Fold, folded: list[_Columns], starts: npt.NDArray[np.int64],
                      winners: list[bytes], numbers: npt.NDArray[np.int64], topic_id: int,
                      partition: int, skip: int, pause: Callable[[], None] | None,
                      pause_every: int) -> None:
    """Encode the winners of a pass of plain records (`_Columns.plain`) at once.

    Why: record by record, a pass of 10,000 events in 1,000 records spent 22
    µs a record in numpy calls on a few winners each, a third of the pass's
    CPU and of the GIL it holds beside the event loop (docs/latency.md). Here
    each head field becomes one array over the pass's events (a few list
    extends per record), gathered at the winners' numbers (ascending: the
    same order the records give), and encoded in slices of `pause_every`
    winners with `pause` between two.
    """
    counts = np.diff(starts)
    record_of = np.repeat(np.arange(len(folded)), counts)
    position = np.arange(int(starts[-1]), dtype=np.int64) - starts[:-1][record_of]
    bases = np.asarray([c.record.base_offset for c in folded], np.int64)
    scn_firsts = np.asarray([c.record.scn_first for c in folded], np.int64)
    windows = np.asarray([c.record.window for c in folded], bool)
    offsets = bases[record_of] + position
    scns = _event_scns(offsets, scn_firsts[record_of], bases[record_of], windows[record_of])
    publish = np.asarray([c.record.publish_time_ms for c in folded], np.int64)[record_of]
    event_times: list[int] = []
    slots: list[int] = []
    opcodes: list[int] = []
    values: list[bytes] = []
    for c in folded:
        batch, count = c.batch, c.count
        for out, column in ((event_times, batch.event_times_ms), (slots, batch.slots),
                            (opcodes, batch.opcodes)):
            out.extend(expand(column, count, 0))
        values.extend(batch.values)
    columns = {"offset": offsets, "scn": scns, "publish_time_ms": publish,
               "event_time_ms": np.asarray(event_times, np.int64),
               # the broker stores slots below 65,536; damaged bytes wrap, as in the C fold
               "slot": np.asarray(slots, np.int64).astype(np.uint16),
               "opcode": np.asarray(opcodes, np.uint8)}
    size, step = codec.ENTRY_HEAD.size, pause_every or len(winners)
    for first in range(0, len(winners), step):
        if first and pause is not None:
            pause()
        at = numbers[first:first + step]
        heads = codec.encode_heads(len(at), **{k: v[at] for k, v in columns.items()})
        keys = winners[first:first + step]
        entries = [heads[j:j + size] + values[n]
                   for j, n in zip(range(0, len(heads), size), at.tolist(), strict=True)]
        fold.entries.update(zip(keys, entries, strict=True))
        deleted = np.flatnonzero(columns["opcode"][at] == pb.DELETE).tolist()
        for i in deleted:
            n = int(at[i])
            fold.tombstones.append((codec.tombstone_key(topic_id, partition, int(publish[n]),
                                                        int(offsets[n])), keys[i][skip:]))


def _event_scns(offsets: npt.NDArray[np.int64], scn_first: Any, base_offset: Any,
                window: Any) -> npt.NDArray[np.int64]:
    """The SCNs of events at `offsets` of records that list none: their window's, else
    scn_first + their place (`sdk.core.columns.record_scns`' rule, on arrays: the record's
    fields are scalars or one entry per event)."""
    return np.asarray(np.where(window, scn_first, offsets + (scn_first - base_offset)),
                      np.int64)


def _add_winners(fold: Fold, columns: _Columns, topic_id: int, partition: int,
                 skip: int) -> None:
    values = columns.encode()
    fold.entries.update(zip(columns.winners, values, strict=True))
    if not columns.has_deletes():
        return
    for key, value in zip(columns.winners, values, strict=True):
        if codec.entry_is_tombstone(value):
            head = codec.ENTRY_HEAD.unpack_from(value)
            index = codec.tombstone_key(topic_id, partition, head[2], head[0])
            fold.tombstones.append((index, key[skip:]))


def _end_of(record: pb.Record) -> int:
    offsets = record.offsets
    return offsets[-1] + 1 if offsets else record.base_offset + record.batch.count


def _scn_last(record: pb.Record) -> int:
    if record.scns:
        return max(record.scns)
    if record.window:
        return record.scn_first
    return record.scn_first + (_end_of(record) - 1 - record.base_offset)


def account(state: codec.ViewState, keys: Sequence[bytes], new: Sequence[int],
            old: Sequence[int | None], offset_next: int, scn: int) -> codec.ViewState:
    """The state after putting entries of sizes `new` over entries of sizes `old`
    (None: a new key); sizes as sizes.py encodes them.

    Counted with builtins over whole lists (C loops), not a Python loop per key.
    """
    replaced = [size for size in old if size is not None]
    added_keys = sum(map(len, compress(keys, [size is None for size in old])))
    new_bytes, new_tombstones = split_sum(new)
    old_bytes, old_tombstones = split_sum(replaced)
    return codec.ViewState(offset_next, scn, state.keys + len(old) - len(replaced),
                           state.tombstones + new_tombstones - old_tombstones,
                           state.entry_bytes + added_keys + new_bytes - old_bytes)


def expired_tombstones(index: Sequence[tuple[bytes, bytes]], entries: Sequence[bytes | None],
                       entry_prefix: bytes) -> list[bytes]:
    """The entry keys a sweep deletes: those still holding the tombstone indexed.

    Args:
        index: (index key, entry suffix) of tombstones old enough to go.
        entries: the current value of each one's entry (None: gone).
    """
    doomed: list[bytes] = []
    for (index_key, suffix), value in zip(index, entries, strict=True):
        if value is None or not codec.entry_is_tombstone(value):
            continue  # upserted again since: the index entry is stale
        if codec.entry_offset(value) == codec.decode_tombstone_key(index_key)[1]:
            doomed.append(entry_prefix + suffix)
    return doomed


def remove_entries(state: codec.ViewState, keys: Sequence[bytes],
                   values: Sequence[bytes]) -> codec.ViewState:
    """The state after deleting entries (keys with their current values)."""
    n_keys, n_tombstones, n_bytes = state.keys, state.tombstones, state.entry_bytes
    for key, value in zip(keys, values, strict=True):
        n_keys -= 1
        n_bytes -= len(key) + len(value)
        n_tombstones -= codec.entry_is_tombstone(value)
    return replace(state, keys=n_keys, tombstones=n_tombstones, entry_bytes=n_bytes)
