"""One memory budget for the record caches of every dispatcher of a broker.

Job: keep what all dispatchers hold read in memory together within
`dispatch_cache_broker_bytes_max`, however many subscriptions and partitions
there are. Without it each dispatcher kept up to `dispatch_cache_bytes_max`
(16 MiB) of records: one Key_Shared subscription whose consumers stalled on a
64-partition topic took the broker from 190 MB to 1 GB of RSS, and the
default 1,024 partitions allowed 16 GiB per subscription. Pulsar bounds the
same memory broker-wide (`managedLedgerCacheSizeMB`).

Rules:
1. Each cache's limit is its *share*: the budget divided equally among the
   dispatchers that run, and never more than `dispatch_cache_bytes_max`.
   Equal, not on demand, so that a share is known without looking at the
   other caches and a dispatcher never takes records from another's cache
   (a record taken from under a round half done would count as removed by
   retention: `PartitionDispatcher._deliver`).
2. A cache only shrinks in its own dispatcher's round (`RecordCache.trim`,
   after the round's sends). When a dispatcher joins and the share drops,
   every dispatcher whose cache now holds more is woken, so its next round
   trims it: stalled consumers do not keep a dispatcher from giving memory
   back.
3. A smaller cache costs reads, not correctness: a record that left the cache
   is read again from the log when it must be sent.

It must not know about records, consumers or the log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol


class Cache(Protocol):
    """What the budget sees of a cache: how much it holds."""

    bytes: int


class CacheBudget:
    """See the module docstring. Runs on the event loop."""

    def __init__(self, bytes_max: int, cache_bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.cache_bytes_max = cache_bytes_max
        self._members: dict[Cache, Callable[[], None]] = {}
        self.share = cache_bytes_max

    def __len__(self) -> int:
        return len(self._members)

    def join_all(self, joining: Iterable[tuple[Cache, Callable[[], None]]]) -> None:
        """Dispatchers start, each with the `wake` that runs its round (so it trims its
        cache); a subscription's partitions together: one look at the others' caches
        for all of them, not one each (1,024 partitions at a time)."""
        self._members.update(joining)
        self._update()
        if self.share < self.cache_bytes_max:
            share = self.share
            for member, wake_member in self._members.items():
                if member.bytes > share:
                    wake_member()

    def leave(self, cache: Cache) -> None:
        """A dispatcher stopped; the others' shares grow back."""
        if self._members.pop(cache, None) is not None:
            self._update()

    def held(self) -> int:
        """Bytes all member caches hold now (for the metrics and tests)."""
        return sum(member.bytes for member in self._members)

    def _update(self) -> None:
        self.share = min(self.cache_bytes_max, self.bytes_max // max(1, len(self._members)))


__all__ = ["CacheBudget"]
