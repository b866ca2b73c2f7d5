"""The broker's WAL fsyncs and garbage collections during one latency row, from its
Prometheus endpoint.

The disk stalls now and then (floor.py); a stall holds up every event that
arrives during it, so a row's p99 depends on whether one fell in its window.
The broker times every group-commit fsync (`keybus_wal_fsync_seconds`, a
histogram); the latency benchmark reads it before and after each Keybus row
and reports how many fsyncs took 10 ms or more, and the bucket the slowest
fell in. A garbage collection stops the broker's event loop too: it times each
one (`keybus_gc_pause_seconds`, by generation), and a row reports how many ran,
how many were full ones, and the loop's time in them.
The parsing is prometheus_client's own.
"""

from __future__ import annotations

import math
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

FSYNC = "keybus_wal_fsync_seconds"
GC = "keybus_gc_pause_seconds"
FULL_GENERATION = "2"
STALL_S = 0.01  # an fsync this long counts as a stall of the disk

Buckets = dict[float, float]  # upper bound in seconds (inf last) -> cumulative count


def scrape(address: str) -> str:
    """The Prometheus text page of the broker whose /metrics is at `address`
    ("127.0.0.1:PORT")."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def fsync_buckets(text: str) -> Buckets:
    """The buckets of `keybus_wal_fsync_seconds` in a Prometheus text page ({} if absent)."""
    for family in text_string_to_metric_families(text):
        if family.name == FSYNC:
            return {float(s.labels["le"]): s.value for s in family.samples
                    if s.name == FSYNC + "_bucket"}
    return {}


def fsyncs_between(before: Buckets, after: Buckets) -> dict[str, Any]:
    """What happened between two scrapes: fsyncs, how many took STALL_S or more, and the
    upper bound of the slowest one's bucket in ms (None: none, or past the last bound)."""
    delta = {bound: after[bound] - before.get(bound, 0.0) for bound in after}
    total = delta.get(math.inf, 0.0)
    stalls = total - delta.get(STALL_S, total)
    bounds = [bound for bound, count in sorted(delta.items()) if count >= total]
    slowest = bounds[0] if total and bounds and bounds[0] != math.inf else None
    return {"fsyncs": int(total), "over_10ms": int(stalls),
            "slowest_at_most_ms": None if slowest is None else round(slowest * 1000, 3)}


GcTotals = dict[str, tuple[float, float]]  # generation -> (collections, seconds in them)


def gc_totals(text: str) -> GcTotals:
    """Collections and their seconds so far, by generation ({} if the page has none)."""
    totals: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != GC:
            continue
        for s in family.samples:
            entry = totals.setdefault(s.labels["generation"], [0.0, 0.0])
            if s.name == GC + "_count":
                entry[0] = s.value
            elif s.name == GC + "_sum":
                entry[1] = s.value
    return {generation: (count, seconds) for generation, (count, seconds) in totals.items()}


def gc_between(before: GcTotals, after: GcTotals) -> dict[str, Any]:
    """Collections between two scrapes, the full ones among them, and the ms spent in them
    (the event loop's, since a collection holds the GIL)."""
    def delta(generation: str, i: int) -> float:
        return after[generation][i] - before.get(generation, (0.0, 0.0))[i]

    return {"collections": int(sum(delta(g, 0) for g in after)),
            "full": int(delta(FULL_GENERATION, 0)) if FULL_GENERATION in after else 0,
            "ms": round(1000 * sum(delta(g, 1) for g in after), 3)}
