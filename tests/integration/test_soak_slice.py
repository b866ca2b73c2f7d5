"""Goal: the soak run's checks hold on a bounded slice of it: every acknowledged produce
reaches the Key_Shared and the Shared subscription, per-key order holds within each
consumer session, the backlog drains after the producer stops, retention ran, and the
broker's file descriptors and threads come back to their warm-up level (loose slack).
No timing targets.

Method: `benchmarks.soak.run`, the code behind `python -m benchmarks soak`, for about
30 s of wall time: a real broker process (fsync on), 4 partitions with a small
retention, a producer at 400 events/s for 18 s, 3 Key_Shared consumers of which one
leaves and a new one joins every 2 s, a Shared subscription and follow readers.
"""

from __future__ import annotations

from benchmarks import soak


def test_a_bounded_soak_slice_passes_every_check() -> None:
    lines: list[str] = []
    args = soak.parse_args(["--minutes", "0.3", "--rate", "400", "--churn-s", "2",
                            "--sample-s", "2", "--retention-bytes", "65536",
                            "--drain-s", "30"])
    failed = soak.run(args, lines.append)
    out = "\n".join(lines)
    assert failed == [], out
    assert out.endswith("soak: all checks passed"), out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "t s" not in line]
    assert len(rows) >= 5, out  # sampled during the run, and once after the drain
    assert "Growth per minute over the second half: RSS" in out
