"""How a producer splits its events into sends and when each send is due.

Pure: elapsed time is an argument. Throughput scenarios send `batch_events`
at a time as fast as acknowledgements allow; the latency scenario sends a
small batch every tick so that events leave at a steady rate.
"""

from __future__ import annotations

from benchmarks.measurement import CompareWorkload

TICK_MS = 1  # latency scenario: one small batch per millisecond


def send_batch_events(workload: CompareWorkload, paced: bool) -> int:
    """Events per send: a full batch, or at a fixed rate, what one tick holds (at least 1)."""
    if not paced:
        return workload.batch_events
    return max(1, min(workload.batch_events, workload.rate_per_s * TICK_MS // 1000))


def events_limit(workload: CompareWorkload, paced: bool) -> int:
    return workload.latency_events if paced else workload.events


def next_batch_events(sent: int, elapsed_s: float, workload: CompareWorkload, paced: bool) -> int:
    """How many events the next send carries; 0 when the producer is done.

    Done at the count limit, or past `duration_s` when one is set (throughput
    scenarios only: the latency scenario is bounded by its count).
    """
    limit = events_limit(workload, paced)
    if sent >= limit:
        return 0
    if not paced and workload.duration_s is not None and elapsed_s >= workload.duration_s:
        return 0
    return min(send_batch_events(workload, paced), limit - sent)


def due_s(sent: int, rate_per_s: int) -> float:
    """When (seconds after the start) the send that begins at event `sent` is due."""
    return sent / rate_per_s
