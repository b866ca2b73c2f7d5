"""Latency histograms: HdrHistogram (the `hdrhistogram` package) in microseconds.

Every latency figure of the benchmarks (the systems' publish-to-delivery
times, the disk's fsync, the gRPC round trip) is recorded here, so p50, p99,
p99.9 and max are read the same way everywhere, and the whole distribution
can be kept (`encoded`, HdrHistogram's standard compressed form).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hdrh.histogram import HdrHistogram

HISTOGRAM_US_MAX = 600_000_000  # 10 minutes: anything longer is recorded as this
SIGNIFICANT_DIGITS = 3
PERCENTILES = (("p50_ms", 50.0), ("p99_ms", 99.0), ("p999_ms", 99.9))


def histogram() -> HdrHistogram:
    """An empty histogram of microseconds, 1 µs to 10 min, 3 significant digits."""
    return HdrHistogram(1, HISTOGRAM_US_MAX, SIGNIFICANT_DIGITS)


def record_us(hist: HdrHistogram, value_us: float) -> None:
    """Record one value; below 1 µs counts as 1 µs, above the top as the top."""
    hist.record_value(min(max(1, round(value_us)), HISTOGRAM_US_MAX))


def of_ms(values_ms: Iterable[float]) -> HdrHistogram:
    """A histogram of millisecond values."""
    hist = histogram()
    for value in values_ms:
        record_us(hist, value * 1000)
    return hist


def figures_ms(hist: HdrHistogram) -> dict[str, Any]:
    """p50, p99, p99.9 and max in milliseconds, and the count (just the count when empty)."""
    count = hist.get_total_count()
    if not count:
        return {"samples": 0}
    figures: dict[str, Any] = {"samples": count}
    for name, q in PERCENTILES:
        figures[name] = round(hist.get_value_at_percentile(q) / 1000, 3)
    figures["max_ms"] = round(hist.get_max_value() / 1000, 3)
    return figures


def encoded(hist: HdrHistogram) -> str:
    """The whole distribution in HdrHistogram's compressed base64 form."""
    return str(hist.encode().decode("ascii"))
