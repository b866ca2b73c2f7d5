"""A block RocksDB cannot read is never taken for the end of what is read.

Goal: an iterator that stopped on a damaged block raises `store_unreadable`
(logged once per place) wherever the store scans; a partition's tail that
cannot be read is an error, never an empty log that new events would be
written over; a dispatcher's read and a Read chunk keep what lay before the
damage and report only that far as read (the next read raises).
Method: a real RocksDB in a temp dir whose log family's iterator is replaced by
one that stops on a damaged block after the records it was given, as RocksDB's
does (valid() false, status() raising its Corruption status). A real damaged
file under a broker: tests/integration/test_store_damaged.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from broker.errors import BrokerError
from broker.log import codec
from broker.log.rocks_store import Append, RocksStore
from broker.read_path import ReadSpec, read_chunk
from broker.subscription.core_types import ReadRequest
from broker.subscription.log_reader import read_events
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb

DAMAGE = ("Corruption: block checksum mismatch: stored = 1, computed = 2  in "
          "/data/log.rocksdb/000009.sst offset 2090240 size 1044124")
RECORDS, EVENTS = 4, 5


class _DamagedIter:
    """RocksDB's iterator over (key, value) pairs, with the pairs at positions `bad` in a
    block it cannot read: on one it is not valid and its status raises."""

    def __init__(self, items: list[tuple[bytes, bytes]], bad: set[int]) -> None:
        self.items, self.bad, self.at = items, bad, -1

    def seek(self, key: bytes) -> None:
        self.at = next((i for i, (k, _) in enumerate(self.items) if k >= key), len(self.items))

    def seek_for_prev(self, key: bytes) -> None:
        self.at = max((i for i, (k, _) in enumerate(self.items) if k <= key), default=-1)

    def valid(self) -> bool:
        return 0 <= self.at < len(self.items) and self.at not in self.bad

    def key(self) -> bytes:
        return self.items[self.at][0]

    def value(self) -> bytes:
        return self.items[self.at][1]

    def next(self) -> None:
        self.at += 1

    def status(self) -> None:
        if self.at in self.bad:  # stopped on the damage, not at the end
            raise Exception(DAMAGE)


class _Family:
    def __init__(self, real: Any, bad: set[int]) -> None:
        self.real, self.bad = real, bad

    def close(self) -> None:
        self.real.close()

    def iter(self) -> _DamagedIter:
        it = self.real.iter()
        it.seek_to_first()
        items = []
        while it.valid():
            items.append((bytes(it.key()), bytes(it.value())))
            it.next()
        return _DamagedIter(items, self.bad)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RocksStore]:
    store = RocksStore(str(tmp_path / "db"), fsync=False)
    store.save_topic({"name": "t", "topic_id": 1, "partitions": 1})
    appends = []
    for n in range(RECORDS):
        base = n * EVENTS
        keys = list(range(base, base + EVENTS))
        body = pb.Record(topic="t", partition=0, base_offset=base, scn_first=base + 1,
                         publish_time_ms=1, batch=pb.EventBatch(
                             count=EVENTS, key_ints=keys, values=[b"v"] * EVENTS,
                             slots=slots_of(keys))).SerializeToString()
        appends.append(Append(base, base + 1, EVENTS, False,
                              codec.encode_record(body, 1, EVENTS, base + 1, False)))
    store.append(1, 0, appends, {}, 0, 0)
    yield store
    store.close()


def _damage(store: RocksStore, *records: int) -> None:
    """The log's records at these positions (0: the first) in a damaged block."""
    store._views["log"] = _Family(store._views["log"], set(records))  # type: ignore[assignment]


def test_a_read_keeps_what_lies_before_the_damage_then_raises(store: RocksStore) -> None:
    _damage(store, 2)
    spec = ReadSpec(1, 0, None, 10_000, 1 << 20, None, None)
    chunk = read_chunk(store, spec, 0)
    assert chunk.events == 2 * EVENTS and chunk.next_offset == 2 * EVENTS
    with pytest.raises(BrokerError) as raised:
        read_chunk(store, spec, chunk.next_offset)
    assert raised.value.kind.name == "store_unreadable" and raised.value.code.name == "DATA_LOSS"
    assert "the log of t/0" in raised.value.message


def test_a_dispatcher_read_counts_only_what_it_read(store: RocksStore) -> None:
    """Before, the read covered up to its stop (the log's end) with the damaged span unread:
    the dispatcher's cursor would have moved past events it never delivered."""
    _damage(store, 2)
    request = ReadRequest(ticket=1, start=0, stop=RECORDS * EVENTS, events_max=10_000)
    records, result = read_events(store, 1, 0, request, None, 1 << 20)
    assert [r.base for r in records] == [0, EVENTS]
    assert result.stop == 2 * EVENTS and result.offsets.tolist() == list(range(2 * EVENTS))
    later = ReadRequest(ticket=2, start=result.stop, stop=RECORDS * EVENTS, events_max=10_000)
    with pytest.raises(BrokerError, match="cannot be read"):
        read_events(store, 1, 0, later, None, 1 << 20)


def test_a_read_never_seeks_past_the_damaged_record_holding_its_start(
        store: RocksStore) -> None:
    """Offset 12 lies in the third record, damaged; the fourth is readable. Before, the
    read sought the first record at or after 12, the fourth, and skipped 12-14."""
    _damage(store, 2)
    spec = ReadSpec(1, 0, None, 10_000, 1 << 20, None, None)
    with pytest.raises(BrokerError, match="from offset 12 cannot be read"):
        read_chunk(store, spec, 12)


def test_a_tail_that_cannot_be_read_is_no_empty_log(store: RocksStore) -> None:
    assert store.recover_tail(1, 0).next_offset == RECORDS * EVENTS
    _damage(store, RECORDS - 1)  # the last record's block is the damaged one
    with pytest.raises(BrokerError, match="the log's last record of t/0 cannot be read"):
        store.recover_tail(1, 0)


def test_the_damage_is_logged_once_per_place(store: RocksStore,
                                             caplog: pytest.LogCaptureFixture) -> None:
    _damage(store, 0)
    spec = ReadSpec(1, 0, None, 10_000, 1 << 20, None, None)
    with caplog.at_level(logging.ERROR, logger="keybus.store"):
        for _ in range(3):
            with pytest.raises(BrokerError):
                read_chunk(store, spec, 0)
    lines = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(lines) == 1 and "Corruption: block checksum mismatch" in lines[0]
    assert "/data/log.rocksdb/000009.sst" in lines[0]  # the operator gets the file


def test_an_undamaged_store_reads_to_its_end(store: RocksStore) -> None:
    spec = ReadSpec(1, 0, None, 10_000, 1 << 20, None, None)
    assert read_chunk(store, spec, 0).events == RECORDS * EVENTS
    request = ReadRequest(ticket=1, start=0, stop=RECORDS * EVENTS + 100, events_max=10_000)
    _, result = read_events(store, 1, 0, request, None, 1 << 20)
    assert result.stop == RECORDS * EVENTS + 100  # the end of the log: read up to the stop
    assert np.array_equal(result.offsets, np.arange(RECORDS * EVENTS))
