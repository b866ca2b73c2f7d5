"""Keep benchmarks/RESULTS.md: one generated table per command, newest run wins.

The file has hand-written notes (profiles, analysis) outside the generated
blocks; a block is delimited by `<!-- bench: COMMAND -->` ... `<!-- /bench -->`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
COLUMNS = ("scenario", "events", "value_bytes", "keys", "batch_events", "partitions", "fsync",
           "events_per_s", "mb_per_s", "seconds")


def table(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [f"`{report['command']}` — {m['date']}, {m['nproc']} cores, {m['cpu']}, "
             f"Python {m['python']}", "", "| " + " | ".join(COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]
    for result in report["results"]:
        cells = []
        for column in COLUMNS:
            value = result.get(column, "")
            cells.append(f"{value:,}" if isinstance(value, int) and not isinstance(value, bool)
                         else str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def record(report: dict[str, Any], notes: str = "",
           render: Callable[[dict[str, Any]], str] = table) -> None:
    """Replace (or add) this command's block; `notes` go under its table."""
    record_block(report["command"], render(report) + (f"\n\n{notes}" if notes else ""))


def record_block(command: str, body: str) -> None:
    """Write `body` as the generated block of `command` (replacing the previous one)."""
    start, end = f"<!-- bench: {command} -->", "<!-- /bench -->"
    block = f"{start}\n{body}\n{end}"
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if start in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    RESULTS.write_text(text)
