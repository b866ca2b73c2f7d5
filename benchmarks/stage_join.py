"""Join the stage notes of `stage_trace.py` with the clients' stamps: where each millisecond goes. Pure.

Inputs, all CLOCK_MONOTONIC nanoseconds: per event its offset, the time its
send was due and its arrival at a consumer (`Arrival`); per value stamp when
its batch left the producer's accumulator for the Sender (`left`) and when the
answer to it was handled (`answered`, for `round_trips_ns`); and the
broker's notes (`stage_trace.py`). Output: per event the consecutive stages
below, which add up to its whole latency (a stage that the clocks of two
threads make slightly negative counts as 0 in the percentiles, never dropped).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

STAGES = (
    ("due → batch leaves the producer", "the producer loop's wake at the due time, then its "
     "batching: Nagle's rule (the answer to the request in flight) or linger"),
    ("→ the partition has the request", "gRPC hop in, the Produce servicer"),
    ("→ decided", "the partition's queue: waiting for the group commit in flight"),
    ("→ written and fsynced", "the WriteBatch on the loop, the WAL fsync on the syncer thread"),
    ("→ published", "back on the event loop: the durable end moves"),
    ("→ dispatcher round starts", "the dispatcher's wake"),
    ("→ delivery queued", "the round: read the recent records, decide, cut the delivery"),
    ("→ arrival at the consumer", "the stream's outbox, gRPC hop out, the consumer's receive"),
)


@dataclass(frozen=True, slots=True)
class Arrival:
    offset: int
    sent_ns: int
    arrived_ns: int


def _by_offset(notes: Sequence[Sequence[Any]], kind: str) -> dict[int, tuple[int, int]]:
    """decide notes: offset -> (submitted, decided)."""
    found: dict[int, tuple[int, int]] = {}
    for note in notes:
        if note[0] == kind:
            _, base, count, submitted, decided = note
            for offset in range(base, base + count):
                found[offset] = (submitted, decided)
    return found


def _groups(notes: Sequence[Sequence[Any]]) -> tuple[list[int], list[int], list[int]]:
    """The groups' (start, stop, synced_ns), sorted by start."""
    synced = sorted((n[1], n[2], n[3]) for n in notes if n[0] == "synced")
    return [g[0] for g in synced], [g[1] for g in synced], [g[2] for g in synced]


def round_trips_ns(left: dict[int, int], answered: dict[int, int]) -> list[int]:
    """The producer's round trip per batch: it left for the Sender → its answer was
    handled. What a tick that finds a request in flight waits for, at most (Nagle's rule).
    Keyed by value stamp, so a batch counts once per tick it holds; a tick split over two
    batches counts its last."""
    return [answered[stamp] - sent for stamp, sent in left.items() if stamp in answered]


def wal_fsyncs_ns(notes: Sequence[Sequence[Any]]) -> list[int]:
    """How long each of the broker's WAL fsyncs took on its syncer thread (its `synced`
    note's end minus its start; older notes without a start are left out)."""
    return [n[3] - n[4] for n in notes if n[0] == "synced" and len(n) > 4]


def _delivered(notes: Sequence[Sequence[Any]], published: dict[int, int]) -> dict[int, int]:
    """offset -> when the first delivery holding it after its publish was queued."""
    found: dict[int, int] = {}
    for note in notes:
        if note[0] != "deliver":
            continue
        _, low, high, at = note
        for offset in range(low, high + 1):
            if offset not in found and published.get(offset, at + 1) <= at:
                found[offset] = at
    return found


def stage_rows(notes: Sequence[Sequence[Any]], arrivals: Sequence[Arrival],
               left: dict[int, int]) -> list[list[int]]:
    """Per joined event, the stages' durations in ns (in STAGES order)."""
    decided = _by_offset(notes, "decide")
    starts, stops, synced_at = _groups(notes)
    publishes = [(n[1], n[2]) for n in notes if n[0] == "publish"]
    ends = [end for end, _ in publishes]
    rounds = sorted(n[1] for n in notes if n[0] == "round")
    published = {}
    for arrival in arrivals:
        i = bisect.bisect_right(ends, arrival.offset)
        if i < len(publishes):
            published[arrival.offset] = publishes[i][1]
    delivered = _delivered(notes, published)
    rows = []
    for a in arrivals:
        g = bisect.bisect_right(starts, a.offset) - 1
        if a.offset not in decided or a.offset not in delivered or g < 0 or \
                a.offset >= stops[g] or a.sent_ns not in left:
            continue
        submitted, decided_at = decided[a.offset]
        publish_at, deliver_at = published[a.offset], delivered[a.offset]
        r = bisect.bisect_right(rounds, deliver_at) - 1
        round_at = max(rounds[r] if r >= 0 else publish_at, publish_at)
        points = [a.sent_ns, left[a.sent_ns], submitted, decided_at, synced_at[g], publish_at,
                  round_at, deliver_at, a.arrived_ns]
        rows.append([later - earlier for earlier, later in pairwise(points)])
    return rows
