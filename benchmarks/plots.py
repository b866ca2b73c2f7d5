"""PNG plots of a comparison: throughput by scenario, latency distribution.

Drawn with matplotlib's Agg backend (no display) from the report dict alone,
so a saved `benchmarks/out/compare.json` can be redrawn. Written beside
RESULTS.md in `benchmarks/plots/`, which the generated block links to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PLOTS_DIR = Path(__file__).resolve().parent / "plots"
COLORS = {"Keybus": "#1f77b4", "Redis Streams": "#d62728", "NATS JetStream": "#2ca02c"}
THROUGHPUT_SCENARIOS = ("produce", "consume", "churn")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _unordered(row: dict[str, Any]) -> bool:
    """Keybus Shared (no key order): hatched bars, dashed lines beside Key_Shared."""
    return bool(row["system"] == "Keybus Shared")


def _measured(report: dict[str, Any], scenario: str) -> list[dict[str, Any]]:
    return [r for r in report["results"] if r["scenario"] == scenario and "events_per_s" in r]


def throughput(report: dict[str, Any], path: Path) -> Path:
    """Grouped bars: events/s of each system in each throughput scenario."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(11, 5), dpi=110)
    x = 0.0
    ticks: list[tuple[float, str]] = []
    for scenario in THROUGHPUT_SCENARIOS:
        rows = _measured(report, scenario)
        if not rows:
            continue
        start = x
        for row in rows:
            bar = axes.bar(x, row["events_per_s"], width=0.8,
                           color=COLORS.get(row.get("family", ""), "#7f7f7f"),
                           hatch="//" if _unordered(row) else None)
            axes.bar_label(bar, labels=[f"{row['system']}\n{row['events_per_s'] / 1000:,.0f}k/s"],
                           fontsize=7, padding=2)
            x += 1
        ticks.append(((start + x - 1) / 2, scenario))
        x += 0.8
    axes.set_xticks([t for t, _ in ticks], [label for _, label in ticks])
    axes.yaxis.set_major_formatter(lambda value, _: f"{value / 1000:,.0f}k")
    axes.set_ylabel("events/s (higher is better)")
    axes.set_title(_subtitle(report, "Throughput by scenario"), fontsize=9)
    axes.margins(y=0.2)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def latency(report: dict[str, Any], path: Path) -> Path:
    """Distribution (percentile against ms, log scale) of publish-to-delivery latency."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 4.8), dpi=110)
    for row in _measured(report, "latency"):
        points = row.get("latency_quantiles") or []
        if not points:
            continue
        axes.plot([max(v, 1e-3) for _, v in points], [q for q, _ in points],
                  color=COLORS.get(row.get("family", ""), "#7f7f7f"),
                  linestyle="--" if _unordered(row) else "-",
                  label=f"{row['system']}: p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms")
    axes.set_xscale("log")
    axes.set_xlabel("publish to delivery, ms (log scale; lower is better)")
    axes.set_ylabel("percentile")
    axes.set_ylim(0, 100)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    axes.set_title(_subtitle(report, "Latency distribution"), fontsize=9)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def _subtitle(report: dict[str, Any], title: str) -> str:
    m, w = report["machine"], report["workload"]
    return (f"{title} — {w['value_bytes']}-byte values, {w['keys']:,} keys, {w['consumers']} "
            f"consumers; {m['nproc']} cores, {m['date']}")


def draw(report: dict[str, Any], directory: Path = PLOTS_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return [throughput(report, directory / "throughput.png"),
            latency(report, directory / "latency.png")]
