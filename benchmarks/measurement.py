"""The comparison's workload, what a driver measures, and the figures made from it.

Pure: no clock, no I/O. Every system (Keybus, Redis Streams, NATS JetStream)
reports a `Measurement`, and `summarize` turns each into the published figures
the same way, so no system gets its own arithmetic. Latency percentiles come
from an HdrHistogram (`histogram.py`), kept whole in each row (`latency_histogram`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks import histogram

STAMP_BYTES = 8  # the send time at the head of every value (see payload.py)
KEY_SHARED_MODES = ("consistent", "auto_split")


@dataclass(frozen=True)
class CompareWorkload:
    """One workload for every system; limits bound every loop in count and time.

    events: the most events a throughput scenario sends (a hard cap).
    duration_s: stop sending earlier once this much time has passed (None: count only).
    latency_events / rate_per_s: length and pace of the latency scenario.
    deadline_s: a scenario still running after this is stopped and marked incomplete.
    churn_events / churn_period_s: the churn scenario's backlog, and how often it
        changes its consumers (1 s: a 4 M-event drain here takes 3-4 s, so it sees
        leaves and rejoins; at 2 s it ended before the first rejoin).
    warmup_s: latency scenario: events due in its first `warmup_s` are delivered and
        counted, but their latencies are not recorded (connections and caches warming).
    key_shared_mode: how Keybus's Key_Shared subscriptions assign keys: "consistent"
        (consistent hashing, the broker's default as Pulsar's since apache/pulsar#6791: a
        leaver's keys spread, shares differ by up to ~25%) or "auto_split" (PIP-34's
        hash ranges: 4 consumers get equal quarters, but a leave hands the leaver's whole
        range to one neighbour, so 3 of them serve 1/2, 1/4 and 1/4 of the keys).
    """

    events: int = 1_000_000
    duration_s: float | None = None
    value_bytes: int = 100
    keys: int = 10_000
    batch_events: int = 1_000
    consumers: int = 4
    rate_per_s: int = 10_000
    latency_events: int = 100_000
    deadline_s: float = 300.0
    churn_events: int = 4_000_000
    churn_period_s: float = 1.0
    warmup_s: float = 0.0
    key_shared_mode: str = "consistent"

    def __post_init__(self) -> None:
        if self.value_bytes < STAMP_BYTES:
            raise ValueError(f"value_bytes {self.value_bytes} is too small: each value carries an "
                             f"{STAMP_BYTES}-byte send time")
        for name in ("events", "keys", "batch_events", "consumers", "rate_per_s", "latency_events",
                     "churn_events"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError(f"duration_s must be > 0 or None, got {self.duration_s}")
        if self.warmup_s < 0:
            raise ValueError(f"warmup_s must be >= 0, got {self.warmup_s}")
        if self.churn_period_s <= 0:
            raise ValueError(f"churn_period_s must be > 0, got {self.churn_period_s}")
        if self.deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {self.deadline_s}")
        if self.key_shared_mode not in KEY_SHARED_MODES:
            raise ValueError(f"key_shared_mode {self.key_shared_mode!r} is invalid; allowed: "
                             f"{', '.join(KEY_SHARED_MODES)} (sticky needs ranges per consumer)")


@dataclass
class Measurement:
    """What one scenario on one system measured (client processes and server summed).

    events: acknowledged by the system (produce) or delivered and acknowledged
        by a consumer (end to end, latency).
    seconds: from the start signal to the last acknowledgement.
    complete: False when the deadline stopped it before every event was counted.
    """

    system: str
    scenario: str
    events: int
    seconds: float
    client_cpu_s: float
    server_cpu_s: float
    value_bytes: int
    consumers: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    complete: bool = True
    note: str = ""


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of already sorted values."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within 0..100, got {q}")
    rank = max(1, -(-len(sorted_values) * q // 100))  # ceil(n * q / 100), at least 1
    return sorted_values[int(rank) - 1]


def quantile_points(sorted_values: Sequence[float], points: int = 200) -> list[tuple[float, float]]:
    """(percent, value) pairs along the distribution: a small stand-in for the samples."""
    if not sorted_values:
        return []
    steps = [100 * i / points for i in range(1, points)] + [99.5, 99.9, 100.0]
    return [(q, percentile(sorted_values, q)) for q in sorted(set(steps))]


def per_million(cpu_s: float, events: int) -> float | None:
    return round(cpu_s / events * 1e6, 2) if events else None


def summarize(measurement: Measurement) -> dict[str, Any]:
    """The published figures of one measurement (rates, percentiles, CPU per million)."""
    m = measurement
    seconds = max(m.seconds, 1e-9)
    summary = {key: value for key, value in asdict(m).items() if key != "latencies_ms"}
    summary.update(
        seconds=round(m.seconds, 3),
        client_cpu_s=round(m.client_cpu_s, 3),
        server_cpu_s=round(m.server_cpu_s, 3),
        events_per_s=round(m.events / seconds),
        mb_per_s=round(m.events * m.value_bytes / seconds / 1e6, 2),
        cpu_s_per_m_client=per_million(m.client_cpu_s, m.events),
        cpu_s_per_m_server=per_million(m.server_cpu_s, m.events),
    )
    if m.latencies_ms:
        ordered = sorted(m.latencies_ms)
        hist = histogram.of_ms(ordered)  # p50/p99/p99.9/max from the HdrHistogram
        figures = histogram.figures_ms(hist)
        summary.update(p50_ms=figures["p50_ms"], p99_ms=figures["p99_ms"],
                       p999_ms=figures["p999_ms"], max_ms=round(ordered[-1], 3),
                       latency_samples=len(ordered), latency_histogram=histogram.encoded(hist),
                       latency_quantiles=[(q, round(v, 4)) for q, v in quantile_points(ordered)])
    return summary
