"""What an event processor counts: per processor (`ProcessorStats`, for code
and tests) and as Prometheus metrics (for a scrape, when the application
serves prometheus_client's registry).

Prometheus labels are topic, consumer group and owner (plus partition for
lag); a processor removes its label sets when it stops, so they stay bounded
by the processors alive in the process.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge

OWNED_PARTITIONS = Gauge("keybus_processor_owned_partitions",
                         "Partitions an event processor owns and processes",
                         ["topic", "consumer_group", "owner"])
CLAIMS_WON = Counter("keybus_processor_claims_won", "Ownership claims that won (renewals too)",
                     ["topic", "consumer_group", "owner"])
CLAIMS_LOST = Counter("keybus_processor_claims_lost",
                      "Ownership claims that lost a race (etag changed)",
                      ["topic", "consumer_group", "owner"])
STEALS = Counter("keybus_processor_steals", "Partitions taken from the most loaded owner",
                 ["topic", "consumer_group", "owner"])
LAPSES = Counter("keybus_processor_lapses",
                 "Partitions closed because their claim was not renewed within the expiration",
                 ["topic", "consumer_group", "owner"])
CHECKPOINTS_REFUSED = Counter(
    "keybus_processor_checkpoints_refused",
    "Checkpoints refused because the processor no longer owned the partition",
    ["topic", "consumer_group", "owner"])
CHECKPOINT_LAG = Gauge("keybus_processor_checkpoint_lag_events",
                       "Events after the last checkpoint up to the end of the log",
                       ["topic", "consumer_group", "owner", "partition"])


@dataclass
class ProcessorStats:
    """Counters of one processor since it started."""

    owned: int = 0
    claims_won: int = 0
    claims_lost: int = 0
    steals: int = 0
    lapses: int = 0  # partitions closed because their claim lapsed (leases.py)
    cycles: int = 0
    balancing_errors: int = 0
    events: int = 0
    checkpoints: int = 0
    checkpoints_refused: int = 0  # written after ownership was lost: not stored (OwnershipLost)
    checkpoint_lag: dict[int, int] = field(default_factory=dict)


class ProcessorMetrics:
    """One processor's stats and its Prometheus label sets, updated together."""

    def __init__(self, topic: str, consumer_group: str, owner_id: str) -> None:
        self.stats = ProcessorStats()
        self._labels = (topic, consumer_group, owner_id)

    def cycle(self, claims: int, won: int, stolen: bool) -> None:
        self.stats.cycles += 1
        self.stats.claims_won += won
        self.stats.claims_lost += claims - won
        CLAIMS_WON.labels(*self._labels).inc(won)
        CLAIMS_LOST.labels(*self._labels).inc(claims - won)
        if stolen:
            self.stats.steals += 1
            STEALS.labels(*self._labels).inc()

    def lapsed(self, count: int) -> None:
        self.stats.lapses += count
        LAPSES.labels(*self._labels).inc(count)

    def owned(self, count: int) -> None:
        self.stats.owned = count
        OWNED_PARTITIONS.labels(*self._labels).set(count)

    def events(self, count: int) -> None:
        self.stats.events += count

    def checkpoint(self, partition: int, lag: int) -> None:
        self.stats.checkpoints += 1
        self.lag(partition, lag)

    def lag(self, partition: int, lag: int) -> None:
        """Events after the partition's last checkpoint up to the log's end, as of
        a checkpoint or a batch read."""
        self.stats.checkpoint_lag[partition] = lag
        CHECKPOINT_LAG.labels(*self._labels, str(partition)).set(lag)

    def forget_lag(self, partition: int) -> None:
        """The partition is another processor's now: its lag is the new owner's to say
        (a stale value here, beside the new owner's, would be read as the group's)."""
        if self.stats.checkpoint_lag.pop(partition, None) is not None:
            with contextlib.suppress(KeyError):
                CHECKPOINT_LAG.remove(*self._labels, str(partition))

    def checkpoint_refused(self) -> None:
        self.stats.checkpoints_refused += 1
        CHECKPOINTS_REFUSED.labels(*self._labels).inc()

    def remove(self) -> None:
        """Drop this processor's label sets (it stopped)."""
        for metric in (OWNED_PARTITIONS, CLAIMS_WON, CLAIMS_LOST, STEALS, LAPSES,
                       CHECKPOINTS_REFUSED):
            with contextlib.suppress(KeyError):
                metric.remove(*self._labels)
        for partition in self.stats.checkpoint_lag:
            with contextlib.suppress(KeyError):
                CHECKPOINT_LAG.remove(*self._labels, str(partition))
