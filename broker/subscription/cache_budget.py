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

The equal shares, and the waking on a join, are `ShareBudget`'s (`share_budget.py`,
which also bounds the consumers' outboxes); this adds nothing but the names.
"""

from __future__ import annotations

from broker.subscription.share_budget import ShareBudget


class CacheBudget(ShareBudget):
    """See the module docstring. Runs on the event loop."""

    def __init__(self, bytes_max: int, cache_bytes_max: int) -> None:
        super().__init__(bytes_max, cache_bytes_max)


__all__ = ["CacheBudget"]
