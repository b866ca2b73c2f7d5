"""Goal: `python -m benchmarks.stream_floor` (the client's CPU floor per gRPC stream
message, quoted in RESULTS.md) runs and measures what it says: about rate x seconds
messages read, a positive CPU per message.

Method: a one-second run at 200 messages/s (a real grpcio server process on
127.0.0.1); the count is checked within wide bounds (a loaded machine delays).
"""

from __future__ import annotations

from benchmarks.stream_floor import measure


def test_the_floor_reads_about_rate_times_seconds_messages() -> None:
    row = measure(200, 1.0, 5)
    assert 100 <= row["messages"] <= 220
    assert row["cpu_us_per_message"] > 0 and row["cores"] > 0
