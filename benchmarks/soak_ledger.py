"""What the soak run (benchmarks/soak.py) checks, kept pure: which acknowledged produces
each subscription got, per-key order within a consumer session, and growth over time.

Offsets are marked in one bytearray per partition (a byte an offset: a 10-minute run
at 2,000 events/s is 1.2 MB a subscription, where a set of ints would take ~50 times
that in the process doing the work).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def _mark(marks: bytearray, offsets: Iterable[int]) -> None:
    for offset in offsets:
        if offset >= len(marks):
            marks.extend(bytes(offset + 1 - len(marks) + 4096))
        marks[offset] = 1


class Ledger:
    """Acknowledged produces and, per subscription, the offsets its consumers
    received and acknowledged (a batch a leaving consumer dropped unacknowledged
    is not marked: the broker has to deliver it again)."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.acked = [bytearray() for _ in range(partitions)]
        self.acked_events = 0
        self.delivered: dict[str, list[bytearray]] = {}

    def produced(self, partition: int, base_offset: int, count: int) -> None:
        _mark(self.acked[partition], range(base_offset, base_offset + count))
        self.acked_events += count

    def received(self, subscription: str, partition: int, offsets: Iterable[int]) -> None:
        marks = self.delivered.setdefault(
            subscription, [bytearray() for _ in range(self.partitions)])
        _mark(marks[partition], offsets)

    def missing(self, subscription: str, start_offsets: Sequence[int]) -> tuple[int, int, str]:
        """(acknowledged produces never delivered while stored, those retention removed
        before any delivery, the first few of the former as "p/offset")."""
        marks = self.delivered.get(subscription, [bytearray() for _ in range(self.partitions)])
        lost = removed = 0
        examples: list[str] = []
        for partition, acked in enumerate(self.acked):
            got = marks[partition]
            for offset, was_acked in enumerate(acked):
                if not was_acked or (offset < len(got) and got[offset]):
                    continue
                if offset < start_offsets[partition]:
                    removed += 1
                    continue
                lost += 1
                if len(examples) < 5:
                    examples.append(f"{partition}/{offset}")
        return lost, removed, ", ".join(examples)


class SessionOrder:
    """Per-key order of one consumer session: each key's offsets must rise (a key
    lives in one partition, so its offsets compare)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.last: dict[int | str, int] = {}
        self.violation = ""

    def saw(self, keys: Sequence[int | str], offsets: Sequence[int]) -> None:
        last = self.last
        for key, offset in zip(keys, offsets, strict=True):
            before = last.get(key, -1)
            if offset <= before and not self.violation:
                self.violation = (f"consumer {self.name} got key {key!r} at offset {offset} "
                                  f"after offset {before}")
            last[key] = offset


@dataclass(frozen=True)
class Sample:
    """One look at the broker, `at_s` after the producer started."""

    at_s: float
    rss_mb: float
    fds: int
    sst_fds: int  # of fds: RocksDB's table files (it keeps each open; compaction bounds them)
    threads: int
    key_shared_backlog: int
    shared_backlog: int
    reader_lag: int
    acked_events: int
    cache_mb: float

    @property
    def other_fds(self) -> int:
        """Descriptors besides the store's table files: sockets, pipes, logs."""
        return self.fds - self.sst_fds


def slope_per_minute(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute (0 with fewer than 2)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return 0.0
    return 60 * sum((t - mean_t) * (v - mean_v) for t, v in points) / spread


def warm_level(samples: Sequence[Sample], half_s: float, field: str) -> float:
    """The most `field` reached during the first half of the producing (warm-up)."""
    values = [getattr(s, field) for s in samples if s.at_s < half_s]
    return float(max(values)) if values else float(getattr(samples[0], field))


def second_half_slopes(samples: Sequence[Sample], half_s: float, end_s: float
                       ) -> dict[str, float]:
    """Growth per minute of RSS, FDs and threads over the samples of the second half
    of the producing (from `half_s` to `end_s`)."""
    late = [s for s in samples if half_s <= s.at_s <= end_s]
    return {field: slope_per_minute([(s.at_s, float(getattr(s, field))) for s in late])
            for field in ("rss_mb", "fds", "sst_fds", "threads")}
