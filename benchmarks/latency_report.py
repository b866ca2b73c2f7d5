"""The latency run's targets and Markdown (issue 15). Pure: a report dict in, data or text out.

Targets, each checked against figures of the same run:

- fsync before ack, 10,000 events/s, 4 Key_Shared consumers:
  p50 <= disk fsync p50 + 1.5 ms and p99 <= disk fsync p99 + 3 ms;
- the same at 50,000 events/s: p99 <= 2 x (disk fsync p99 + 3 ms);
- `--no-fsync` at 10,000 events/s: p50 <= 1 ms and p99 <= 2 x Redis's p99;
- throughput: Keybus produce and Key_Shared end to end against Redis, as
  ratios (compared with the figures before the issue in RESULTS.md).

Beside them, marked as context and not one of the issue's targets: the p99
at 10,000 events/s against the disk's ideal group commit (floor.py), the
best an fsync-before-ack broker could do on the disk's stalls; and the two
p50 limits applied to the grpcio fan-out floor (fanout_floor.py), which says
whether any broker on grpcio's asyncio stack meets them on this machine.
"""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]
KEY_SHARED = "Keybus Key_Shared"
NO_FSYNC = "Keybus Key_Shared, --no-fsync"
REDIS = "Redis consumer group"
FLOOR = "grpcio fan-out floor"  # benchmarks/fanout_floor.py
FLOOR_FSYNC = "grpcio fan-out floor, fsync"
TARGET_RATE = 10_000
HIGH_RATE = 50_000


def _latency_row(rows: list[Row], system: str, rate: int) -> Row | None:
    return next((r for r in rows if r.get("system") == system and r.get("scenario") == "latency"
                 and r.get("rate_per_s") == rate and "p50_ms" in r), None)


def _throughput_row(rows: list[Row], system: str, scenario: str) -> Row | None:
    return next((r for r in rows if r.get("system") == system and r.get("scenario") == scenario
                 and "events_per_s" in r), None)


def _target(name: str, measured: float | None, limit: float | None, how: str) -> Row:
    if measured is None or limit is None:
        return {"target": name, "measured": None, "limit": None, "how": how, "met": None}
    return {"target": name, "measured": round(measured, 3), "limit": round(limit, 3), "how": how,
            "met": measured <= limit}


def _latency_targets(rows: list[Row], disk: Row) -> list[Row]:
    fsync_10k = _latency_row(rows, KEY_SHARED, TARGET_RATE) or {}
    fsync_50k = _latency_row(rows, KEY_SHARED, HIGH_RATE) or {}
    loose_10k = _latency_row(rows, NO_FSYNC, TARGET_RATE) or {}
    redis_10k = _latency_row(rows, REDIS, TARGET_RATE) or {}
    disk_p50, disk_p99 = disk.get("p50_ms"), disk.get("p99_ms")
    p99_limit = None if disk_p99 is None else disk_p99 + 3
    redis_p99 = redis_10k.get("p99_ms")
    return [
        _target("fsync, 10,000/s: p50 <= disk fsync p50 + 1.5 ms", fsync_10k.get("p50_ms"),
                None if disk_p50 is None else disk_p50 + 1.5, f"disk p50 {disk_p50} ms + 1.5"),
        _target("fsync, 10,000/s: p99 <= disk fsync p99 + 3 ms", fsync_10k.get("p99_ms"),
                p99_limit, f"disk p99 {disk_p99} ms + 3"),
        _target("fsync, 50,000/s: p99 <= 2 x (disk fsync p99 + 3 ms)", fsync_50k.get("p99_ms"),
                None if p99_limit is None else 2 * p99_limit, f"2 x ({disk_p99} + 3)"),
        _target("--no-fsync, 10,000/s: p50 <= 1 ms", loose_10k.get("p50_ms"), 1.0, "1 ms"),
        _target("--no-fsync, 10,000/s: p99 <= 2 x Redis p99", loose_10k.get("p99_ms"),
                None if redis_p99 is None else 2 * redis_p99, f"2 x Redis p99 {redis_p99} ms"),
    ]


def _floor_context(rows: list[Row], disk: Row) -> list[Row]:
    """The issue's p50 limits at 10,000 events/s applied to the grpcio floor (when it ran)."""
    found = []
    with_fsync = _latency_row(rows, FLOOR_FSYNC, TARGET_RATE)
    disk_p50 = disk.get("p50_ms")
    if with_fsync:
        found.append(_target("context, not an issue target: the grpcio fan-out floor with "
                             "fsync, 10,000/s: p50 <= disk fsync p50 + 1.5 ms",
                             with_fsync.get("p50_ms"),
                             None if disk_p50 is None else disk_p50 + 1.5,
                             f"disk p50 {disk_p50} ms + 1.5"))
    loose = _latency_row(rows, FLOOR, TARGET_RATE)
    if loose:
        found.append(_target("context, not an issue target: the grpcio fan-out floor, "
                             "10,000/s: p50 <= 1 ms", loose.get("p50_ms"), 1.0, "1 ms"))
    return found


def _ratio(keybus: Row | None, redis: Row | None) -> float | None:
    if not keybus or not redis or not redis.get("events_per_s"):
        return None
    return round(float(keybus["events_per_s"]) / float(redis["events_per_s"]), 2)


def targets(report: dict[str, Any]) -> list[Row]:
    """Every target with its measured value, its limit (None: not measured) and met or not."""
    rows = report["results"]
    found = _latency_targets(rows, report["floor"]["disk_fsync"])
    group_commit = report["floor"].get("disk_group_commit") or {}
    if group_commit:
        p99 = group_commit.get("p99_ms")
        found.append(_target("context, not an issue target: fsync, 10,000/s: p99 <= ideal group "
                             "commit p99 + 3 ms", (_latency_row(rows, KEY_SHARED, TARGET_RATE)
                                                   or {}).get("p99_ms"),
                             None if p99 is None else p99 + 3,
                             f"the disk's ideal group commit p99 {p99} ms + 3"))
    found += _floor_context(rows, report["floor"]["disk_fsync"])
    for scenario, keybus in (("produce", "Keybus"), ("consume", KEY_SHARED)):
        ratio = _ratio(_throughput_row(rows, keybus, scenario),
                       _throughput_row(rows, "Redis Streams" if scenario == "produce" else REDIS,
                                       scenario))
        found.append({"target": f"{scenario} throughput, Keybus ÷ Redis (same run)",
                      "measured": ratio, "limit": None, "how": "compare with the figure before "
                      "the issue (RESULTS.md)", "met": None})
    return found


def _number(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return f"{value:,.{digits}f}" if isinstance(value, float) else str(value)


def _status(met: bool | None) -> str:
    return {True: "**met**", False: "**not met**", None: "not measured"}[met]


def floor_table(floor: dict[str, Any]) -> str:
    lines = ["| floor | p50 ms | p99 ms | p99.9 ms | max ms | samples | load (1 min) |",
             "|---|---|---|---|---|---|---|"]
    group_commit = floor.get("disk_group_commit") or {}
    rows = [("disk: " + floor["disk_fsync"].get("what", "fsync"), floor["disk_fsync"])]
    if group_commit:
        rows.append((f"disk: {group_commit.get('what')} ({_number(group_commit.get('fsyncs'))} "
                     f"fsyncs, the slowest {_number(group_commit.get('slowest_fsync_ms'))} ms; "
                     "samples are events)", group_commit))
    rows.append(("gRPC round trip on 127.0.0.1", floor.get("grpc_round_trip") or {}))
    for name, figures in rows:
        lines.append(f"| {name} | " + " | ".join(_number(figures.get(k)) for k in (
            "p50_ms", "p99_ms", "p999_ms", "max_ms", "samples", "load_1min")) + " |")
    return "\n".join(lines)


def latency_table(rows: list[Row]) -> str:
    lines = ["| system | rate events/s | events | achieved events/s | p50 ms | p99 ms | p99.9 ms "
             "| max ms | CPU s per M events, clients / server | load (1 min) before / after |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in (r for r in rows if r.get("scenario") == "latency"):
        events = _number(r.get("events")) + ("" if r.get("complete", True) else " (incomplete)")
        lines.append(
            f"| {r['system']} | {_number(r.get('rate_per_s'))} | {events} | "
            f"{_number(r.get('events_per_s'))} | {_number(r.get('p50_ms'))} | "
            f"{_number(r.get('p99_ms'))} | {_number(r.get('p999_ms'))} | "
            f"{_number(r.get('max_ms'))} | {_number(r.get('cpu_s_per_m_client'))} / "
            f"{_number(r.get('cpu_s_per_m_server'))} | {_number(r.get('load_1min'))} / "
            f"{_number(r.get('load_1min_after'))} |" if "p50_ms" in r else
            f"| {r['system']} | {_number(r.get('rate_per_s'))} | — | — | — | — | — | — | — | "
            f"{r.get('note', '')} |")
    return "\n".join(lines)


def stages_table(rows: list[Row]) -> str:
    """Where each millisecond went: the producer loop's lateness (every system), and for
    Keybus the split at the broker's commit start."""
    lines = ["| system | rate events/s | due → the producer's send call (its loop's timer) "
             "p50 / p99 ms | due → commit start p50 / p99 ms | commit start → arrival "
             "p50 / p99 ms |", "|---|---|---|---|---|"]
    for r in (r for r in rows if r.get("scenario") == "latency" and r.get("stages")):
        cells = []
        for name in ("due_to_send", "due_to_commit", "commit_to_arrival"):
            figures = r["stages"].get(name, {})
            cells.append(f"{_number(figures.get('p50_ms'))} / {_number(figures.get('p99_ms'))}")
        lines.append(f"| {r['system']} | {_number(r.get('rate_per_s'))} | " + " | ".join(cells)
                     + " |")
    return "\n".join(lines)


def fsyncs_table(rows: list[Row]) -> str:
    """The broker's WAL fsyncs during each row that has them (Keybus with fsync)."""
    lines = ["| system | rate events/s | WAL fsyncs | 10 ms or more | the slowest, at most ms |",
             "|---|---|---|---|---|"]
    for r in (r for r in rows if r.get("scenario") == "latency"
              and r.get("wal_fsyncs", {}).get("fsyncs")):
        f = r["wal_fsyncs"]
        lines.append(f"| {r['system']} | {_number(r.get('rate_per_s'))} | "
                     f"{_number(f.get('fsyncs'))} | {_number(f.get('over_10ms'))} | "
                     f"{_number(f.get('slowest_at_most_ms'))} |")
    return "\n".join(lines)


def gc_table(rows: list[Row]) -> str:
    """The broker's garbage collections during each Keybus row (each stops its loop)."""
    lines = ["| system | rate events/s | collections | full ones | loop ms in them |",
             "|---|---|---|---|---|"]
    for r in (r for r in rows if r.get("scenario") == "latency" and r.get("gc_pauses")):
        g = r["gc_pauses"]
        lines.append(f"| {r['system']} | {_number(r.get('rate_per_s'))} | "
                     f"{_number(g.get('collections'))} | {_number(g.get('full'))} | "
                     f"{_number(g.get('ms'))} |")
    return "\n".join(lines)


def _loop_row(row: Row) -> bool:
    """A latency row of a Python server (Keybus, the grpcio floor), whose main thread is
    its event loop (Redis's and NATS's main threads say less of them)."""
    return (row.get("scenario") == "latency" and bool(row.get("server_main_thread"))
            and str(row.get("family", "")).startswith(("Keybus", "grpcio")))


def main_thread_table(rows: list[Row]) -> str:
    """The server's event-loop thread in each latency row: the one thread every step of an
    event's path waits for, so how busy it is bounds the latency."""
    lines = ["| system | rate events/s | share of a core | CPU-s per million events |",
             "|---|---|---|---|"]
    for r in (r for r in rows if _loop_row(r)):
        t = r["server_main_thread"]
        lines.append(f"| {r['system']} | {_number(r.get('rate_per_s'))} | "
                     f"{_number(t.get('cores'))} | {_number(t.get('cpu_s_per_m'))} |")
    return "\n".join(lines)


def throughput_table(rows: list[Row]) -> str:
    lines = ["| scenario | system | events | events/s | CPU s per M events, clients / server "
             "| load (1 min) before / after |", "|---|---|---|---|---|---|"]
    for r in (r for r in rows if r.get("scenario") in ("produce", "consume")):
        lines.append(f"| {r['scenario']} | {r['system']} | {_number(r.get('events'))} | "
                     f"{_number(r.get('events_per_s'))} | {_number(r.get('cpu_s_per_m_client'))} "
                     f"/ {_number(r.get('cpu_s_per_m_server'))} | {_number(r.get('load_1min'))} "
                     f"/ {_number(r.get('load_1min_after'))} |")
    return "\n".join(lines)


def targets_table(found: list[Row]) -> str:
    lines = ["| target (issue 15) | measured | limit | from | status |", "|---|---|---|---|---|"]
    for t in found:
        ratio_only = t["limit"] is None and t["measured"] is not None
        status = "ratio" if ratio_only else _status(t["met"])
        lines.append(f"| {t['target']} | {_number(t['measured'])} | {_number(t['limit'])} | "
                     f"{t['how']} | {status} |")
    return "\n".join(lines)


def body(report: dict[str, Any]) -> str:
    """The generated block: heading line, floor, targets, latency and throughput tables."""
    m, w = report["machine"], report["workload"]
    rates = ", ".join(f"{rate:,}" for rate in w["rates"])
    parts = [
        f"`{report['command']}` — {m['date']}, {m['nproc']} cores, {m['cpu']}, Python "
        f"{m['python']}; every server and client on this machine, 127.0.0.1; load average "
        f"(1 min) {m['load_1min_before']} before, {m['load_1min_after']} after",
        "", "| system | server | acknowledged when |", "|---|---|---|",
        *(f"| {s['system']} | {s['version']} | {s['durability']} |" for s in report["systems"]),
        "", "#### the floor, same run", "", floor_table(report["floor"]),
        "", "#### targets, as measured in this run", "", targets_table(report["targets"]),
        "", f"#### latency, open loop: one producer at {rates} events/s for {w['duration_s']} s "
            f"each after a {w['warmup_s']} s warm-up (sent, not recorded), "
        f"{w['consumers']} consumer processes, {w['value_bytes']}-byte values; due send "
            "time (in the value) to arrival at a consumer, HdrHistogram", "",
        latency_table(report["results"])]
    if any(r.get("stages") for r in report["results"]):
        parts += ["", "#### where the time went: how late the producer loop's send call was "
                      "(every system; an asyncio loop's timer wakes up to 1 ms late, time.sleep "
                      "does not), and for Keybus the split at the broker's publish_time_ms, "
                      "stamped when the group commit starts, before its fsync (wall clock, 1 ms "
                      "resolution: each side is within ±1 ms)", "", stages_table(report["results"])]
    if any(_loop_row(r) for r in report["results"]):
        parts += ["", "#### the server's event-loop thread during each row (its main thread, "
                      "/proc; the relay's beside the broker's: what Keybus's own work adds)", "",
                  main_thread_table(report["results"])]
    if any(r.get("wal_fsyncs", {}).get("fsyncs") for r in report["results"]):
        parts += ["", "#### the broker's WAL fsyncs during each row (its keybus_wal_fsync_seconds "
                      "histogram, read before and after the row; a stall holds up every event "
                      "arriving during it)", "", fsyncs_table(report["results"])]
    if any(r.get("gc_pauses") for r in report["results"]):
        parts += ["", "#### the broker's garbage collections during each row (its "
                      "keybus_gc_pause_seconds histogram, read before and after the row; each "
                      "stops the event loop)", "", gc_table(report["results"])]
    if any(r.get("scenario") in ("produce", "consume") for r in report["results"]):
        parts += ["", f"#### throughput, same run: produce {w['events']:,} events (one producer), "
                      f"then {w['consumers']} consumers drain them", "",
                  throughput_table(report["results"])]
    return "\n".join(parts)
