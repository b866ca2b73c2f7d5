"""The high watermark of a replicated topic's partitions, as its role sets it.

What readers of a partition see is limited in one place,
`Partition.set_high_watermark` (broker/read_limit.py); this module says
which high watermark each role sets (Kafka's rules):

* at start, a broker of a cluster shows readers nothing of its log until it
  knows a high watermark (its tail may be unacknowledged);
* a leader with `acks = n` raises it to where n followers report holding the
  log (`AckTracker.acked_end`, the same point that releases produces); with
  `acks = leader` there is none (readers see the durable log end);
* a follower raises it to the high watermark its upstream sends with the
  records (replica reads carry it), never past what it holds;
* a candidate keeps what it had. It never moves back but by truncation.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.partition import Partition


def hold_back(partitions: Iterable[Partition]) -> None:
    """A broker of a cluster starting: nothing readable until a high watermark is known."""
    for partition in partitions:
        partition.hold_back_readers()


def lead(partitions: Iterable[Partition], copies: int) -> None:
    """Leading: no limit with acks = leader; else keep what was readable until
    followers report (`advance`)."""
    for partition in partitions:
        partition.set_high_watermark(None if copies == 0 else partition.end_offset)


def follow(partitions: Iterable[Partition]) -> None:
    """Following (or standing as a candidate): keep what is readable, no more,
    until the upstream sends its high watermark."""
    for partition in partitions:
        if partition.limit.high_watermark is None:
            partition.set_high_watermark(partition.end_offset)


def advance(partition: Partition, high_watermark: int | None) -> None:
    """Raise the high watermark (a leader's acked end, an upstream's sent one)."""
    if high_watermark is None:
        return
    current = partition.limit.high_watermark
    if current is None or high_watermark > current:
        partition.set_high_watermark(high_watermark)
