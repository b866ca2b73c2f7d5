"""Equal owner tables are one object, shared by the partitions that use them.

Goal: a subscription's partitions do not each keep their own copy of the same
65,536-entry owner table (256 KiB: 1,024 partitions of one Key_Shared
subscription held 256 MiB of equal tables). Partitions whose consumers and
segments are the same (consistent hashing and sticky ranges give every
partition the same; Shared has no owners) share one table; a partition whose
consumers differ gets its own, which maps each slot to its owner exactly as a
table of its own would; a table nobody uses is freed.

Method: real `PartitionCore`s of two partitions (consistent hashing, sticky,
Shared), consumers attached and detached in turn; the tables compared by
identity and by content with one built alone.
"""

from __future__ import annotations

import gc

import numpy as np

from broker.subscription.core import CoreLimits, Kind, Mode, PartitionCore
from broker.subscription.cursor import Cursor
from broker.subscription.members import MemberSpec
from broker.subscription.selector import _TABLES, build_owner_table
from sdk.core.model import HashRange


def core(kind: Kind, mode: Mode, partition: int) -> PartitionCore:
    return PartitionCore(kind, mode, partition, CoreLimits(), Cursor(0), 0)


def alone(partition: PartitionCore) -> np.ndarray:
    """The partition's owner table, built as if no other table existed."""
    assert partition.selector is not None
    table = partition.selector.owner_table()
    segments = partition.selector.segments()
    names = [n for n in table.names if n is not None]
    index_of = {name: i + 1 for i, name in enumerate(names)}
    expected = np.zeros(65536, np.uint32)
    for first, last, name in segments:
        expected[first:last + 1] = index_of[name]
    return expected


def test_partitions_with_the_same_consumers_share_one_table() -> None:
    first, second = core(Kind.KEY_SHARED, Mode.CONSISTENT, 0), \
        core(Kind.KEY_SHARED, Mode.CONSISTENT, 1)
    for name, now in (("a", 5), ("b", 9)):
        first.process_attach(MemberSpec(name), now)
        second.process_attach(MemberSpec(name), now + 1)  # joined a moment later there
    assert np.shares_memory(first._owners, second._owners)
    first.process_attach(MemberSpec("c"), 20)  # only on the first partition, so far
    assert not np.shares_memory(first._owners, second._owners)
    for partition in (first, second):
        assert np.array_equal(partition._owners, alone(partition))
    second.process_attach(MemberSpec("c"), 21)
    assert np.shares_memory(first._owners, second._owners)
    second.process_detach("c", 30)
    assert np.array_equal(second._owners, alone(second))
    assert np.array_equal(first._owners, alone(first))


def test_sticky_and_non_keyed_partitions_share_too() -> None:
    halves = (("a", HashRange(0, 32767)), ("b", HashRange(32768, 65535)))
    sticky = [core(Kind.KEY_SHARED, Mode.STICKY, p) for p in range(2)]
    for partition in sticky:
        for name, hash_range in halves:
            partition.process_attach(MemberSpec(name, sticky_ranges=(hash_range,)), 0)
    assert np.shares_memory(sticky[0]._owners, sticky[1]._owners)
    shared = [core(Kind.SHARED, Mode.CONSISTENT, p) for p in range(2)]
    assert np.shares_memory(shared[0]._owners, shared[1]._owners)  # no owner: one table


def test_a_table_no_partition_uses_is_freed() -> None:
    segments = [(0, 99, "x")]
    build_owner_table(segments, ["x"])
    gc.collect()
    assert ((tuple(segments), (None, "x")) not in _TABLES)
    kept = build_owner_table(segments, ["x"])
    assert build_owner_table(list(segments), ["x"]) is kept
