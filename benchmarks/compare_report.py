"""The comparison's Markdown: one table per scenario with Keybus/peer ratios.

Pure: takes the report dict that `compare.py` builds and returns text; the
generated block is delimited like results.py's (`<!-- bench: COMMAND -->` ...
`<!-- /bench -->`) so a rerun of the same command replaces its own block and
leaves hand-written notes alone.
"""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]
KEYBUS = "Keybus"
PLOTS = (("Throughput by scenario", "plots/throughput.png"),
         ("Publish-to-delivery latency distribution", "plots/latency.png"))


def ratio(numerator: float | None, denominator: float | None) -> str:
    """Like "2.41x", or "—" when either side is missing or zero."""
    if not numerator or not denominator:
        return "—"
    return f"{numerator / denominator:.2f}x"


def _number(value: Any, digits: int = 0) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:,.{digits}f}"


def _reference(rows: list[Row]) -> Row | None:
    """The scenario's first measured Keybus row: what the ratios compare against."""
    return next((r for r in rows if r.get("family") == KEYBUS and "events_per_s" in r), None)


def _events(row: Row) -> str:
    return _number(row["events"]) + ("" if row.get("complete", True) else " (incomplete)")


def _throughput_line(row: Row, reference: Row | None) -> list[str]:
    keybus_rate = reference["events_per_s"] if reference else None
    return [row["system"], _number(row.get("consumers") or 1), _events(row),
            _number(row["events_per_s"]), _number(row["mb_per_s"], 1),
            _number(row["cpu_s_per_m_client"], 2), _number(row["cpu_s_per_m_server"], 2),
            ratio(keybus_rate, row["events_per_s"])]


def _latency_line(row: Row, reference: Row | None) -> list[str]:
    keybus_p99 = reference.get("p99_ms") if reference else None
    return [row["system"], _number(row.get("consumers")), _events(row),
            _number(row["events_per_s"]), _number(row.get("p50_ms"), 2),
            _number(row.get("p99_ms"), 2), _number(row.get("max_ms"), 1),
            _number(row["cpu_s_per_m_client"], 2), _number(row["cpu_s_per_m_server"], 2),
            ratio(row.get("p99_ms"), keybus_p99)]


THROUGHPUT_HEADER = ["system", "clients", "events", "events/s", "MB/s",
                     "CPU s per M events, clients", "CPU s per M events, server",
                     "Keybus ÷ system (events/s)"]
LATENCY_HEADER = ["system", "consumers", "events", "events/s", "p50 ms", "p99 ms", "max ms",
                  "CPU s per M events, clients", "CPU s per M events, server",
                  "system p99 ÷ Keybus p99"]


def scenario_table(rows: list[Row], latency: bool) -> str:
    """A Markdown table of one scenario's rows; note rows (failed, pending) say why."""
    header = LATENCY_HEADER if latency else THROUGHPUT_HEADER
    reference = _reference(rows)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        if "events_per_s" not in row:
            cells = [row["system"], row.get("note", "")] + ["—"] * (len(header) - 2)
        elif latency:
            cells = _latency_line(row, reference)
        else:
            cells = _throughput_line(row, reference)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


CHURN_HEADER = ["system", "consumers", "events", "events/s", "MB/s",
                "CPU s per M events, clients", "CPU s per M events, server",
                "leaves + joins", "rejoin to first delivery p50 / max ms",
                "most slots / events waiting",
                "churn ÷ the same drain without churn (their events/s)",
                "churn ÷ steady Key_Shared consume (events/s)"]


def churn_table(rows: list[Row], steady: Row | None) -> str:
    """The churn scenario: throughput beside the same backlog drained without membership
    changes (in the same run, before and after) and beside the steady Key_Shared consume
    row, and how long slots that moved waited for their old owner (drain episodes)."""
    lines = ["| " + " | ".join(CHURN_HEADER) + " |", "|" + "---|" * len(CHURN_HEADER)]
    for row in rows:
        if "events_per_s" not in row:
            cells = [row["system"], row.get("note", "")] + ["—"] * (len(CHURN_HEADER) - 2)
        else:
            cells = [row["system"], _number(row.get("consumers")), _events(row),
                     _number(row["events_per_s"]), _number(row["mb_per_s"], 1),
                     _number(row["cpu_s_per_m_client"], 2), _number(row["cpu_s_per_m_server"], 2),
                     _number(row.get("membership_changes")),
                     f"{_number(row.get('join_wait_p50_ms'), 1)} / "
                     f"{_number(row.get('join_wait_max_ms'), 1)}",
                     f"{_number(row.get('waiting_slots_max'))} / "
                     f"{_number(row.get('waiting_events_max'))}",
                     _own_steady(row),
                     ratio(row["events_per_s"], steady["events_per_s"] if steady else None)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _own_steady(row: Row) -> str:
    """The churn row against its own drains without membership changes (keybus_churn.run)."""
    each = row.get("steady_events_per_s_each")
    if not each:
        return "—"
    return (f"{ratio(row['events_per_s'], row['steady_events_per_s'])} "
            f"({' / '.join(_number(r) for r in each)})")


def _measured(rows: list[Row], scenario: str, system: str) -> Row | None:
    return next((r for r in rows if r["scenario"] == scenario and r["system"] == system
                 and "events_per_s" in r), None)


KEY_SHARED, SHARED = "Keybus Key_Shared", "Keybus Shared"


def cost_of_order_table(rows: list[Row]) -> str | None:
    """Key_Shared beside Shared, same workload and consumers: what per-key order costs."""
    lines = ["| scenario | Key_Shared events/s | Shared events/s | Key_Shared ÷ Shared | "
             "Key_Shared p50 / p99 ms | Shared p50 / p99 ms | CPU s per M events "
             "(clients + server), Key_Shared / Shared |", "|---|---|---|---|---|---|---|"]
    found = False
    for scenario in ("consume", "latency"):
        key_shared, shared = (_measured(rows, scenario, KEY_SHARED),
                              _measured(rows, scenario, SHARED))
        if key_shared is None or shared is None:
            continue
        found = True

        def lat(row: Row) -> str:
            return (f"{_number(row.get('p50_ms'), 2)} / {_number(row.get('p99_ms'), 2)}"
                    if row.get("p50_ms") is not None else "—")

        def cpu(row: Row) -> float:
            return (row["cpu_s_per_m_client"] or 0) + (row["cpu_s_per_m_server"] or 0)

        lines.append(f"| {scenario} | {_number(key_shared['events_per_s'])} | "
                     f"{_number(shared['events_per_s'])} | "
                     f"{ratio(key_shared['events_per_s'], shared['events_per_s'])} | "
                     f"{lat(key_shared)} | {lat(shared)} | "
                     f"{cpu(key_shared):.2f} / {cpu(shared):.2f} |")
    return "\n".join(lines) if found else None


TARGETS = (  # (what, scenario, Keybus row, peer row, at least)
    ("Keybus produce (fsync before ack) ≥ 2x Redis XADD (appendfsync everysec)",
     "produce", KEYBUS, "Redis Streams", 2.0),
    ("Key_Shared end to end, 4 consumers, ≥ 1x Redis consumer groups",
     "consume", KEY_SHARED, "Redis consumer group", 1.0),
    ("Key_Shared end to end, 4 consumers, ≥ 5x NATS JetStream via nats-py",
     "consume", KEY_SHARED, "NATS pull consumer", 5.0),
)


def targets_table(rows: list[Row]) -> str:
    """Issue 6's targets as measured in this run: the ratio, met or short."""
    lines = ["| target (issue 6) | Keybus events/s | peer events/s | measured | status |",
             "|---|---|---|---|---|"]
    for what, scenario, ours, theirs, least in TARGETS:
        mine, peer = _measured(rows, scenario, ours), _measured(rows, scenario, theirs)
        if mine is None or peer is None:
            lines.append(f"| {what} | {_number(mine and mine['events_per_s'])} | "
                         f"{_number(peer and peer['events_per_s'])} | — | not measured |")
            continue
        value = mine["events_per_s"] / peer["events_per_s"]
        status = "met" if value >= least else f"short ({value / least:.0%} of the target)"
        lines.append(f"| {what} | {_number(mine['events_per_s'])} | "
                     f"{_number(peer['events_per_s'])} | **{value:.2f}x** | {status} |")
    return "\n".join(lines)


def other_consumer_counts(rows: list[Row], consumers: int) -> str:
    """"; X runs 1 consumer process" for each measured row whose consumer count is not the
    workload's (Keybus Exclusive admits one consumer), or ""."""
    odd = [f"{r['system']} runs {r['consumers']} consumer process"
           + ("" if r["consumers"] == 1 else "es")
           for r in rows if "events_per_s" in r and r.get("consumers")
           and r["consumers"] != consumers]
    return "".join(f"; {text}" for text in odd)


def _heading(scenario: str, workload: dict[str, Any], rows: list[Row] | None = None) -> str:
    w = workload
    others = other_consumer_counts(rows or [], w["consumers"])
    size = (f"{w['value_bytes']}-byte values, {w['keys']:,} keys, batches of "
            f"{w['batch_events']:,}")
    limit = f"{w['events']:,} events" + (f" or {w['duration_s']} s" if w.get("duration_s") else "")
    if scenario == "produce":
        return f"#### produce: one producer process, {limit}, {size}, until every ack"
    if scenario == "consume":
        return (f"#### consume: {w['consumers']} consumer processes drain the events produce "
                f"stored, until every one is delivered and acknowledged{others}")
    if scenario == "churn":
        return (f"#### churn: {w['consumers']} Key_Shared consumer processes drain "
                f"{w.get('churn_events', 0):,} events stored first (untimed), in mode "
                f"{w.get('key_shared_mode', 'auto_split')}, while, every "
                f"{w.get('churn_period_s', 2.0)} s, one leaves and "
                f"the one that was away rejoins; a rejoining consumer's first delivery waits until "
                f"the slots it took have drained (their old owner acknowledged what it held); "
                f"the same backlog is drained without changes before and after, on the same "
                f"subscription, for the steady rate")
    return (f"#### latency, end to end: one producer at {w['rate_per_s']:,} events/s and "
            f"{w['consumers']} consumer processes, {w['latency_events']:,} events, "
            f"{w['value_bytes']}-byte values; send time (in the value) to arrival at a consumer"
            f"{others}")


def durability_table(systems: list[Row]) -> str:
    lines = ["| system | server | acknowledged when |", "|---|---|---|"]
    lines += [f"| {s['system']} | {s['version']} | {s['durability']} |" for s in systems]
    return "\n".join(lines)


def body(report: dict[str, Any]) -> str:
    """The generated block's content: heading line, durability, tables, plots."""
    m = report["machine"]
    load = (f"; load average (1 min) {m['load_1min_before']} before, {m['load_1min_after']} after"
            if "load_1min_before" in m else "")
    parts = [f"`{report['command']}` — {m['date']}, {m['nproc']} cores, {m['cpu']}, "
             f"Python {m['python']}; every server and client on this machine, 127.0.0.1{load}",
             "", durability_table(report["systems"])]
    results = report["results"]
    parts += ["", "#### targets, as measured in this run", "", targets_table(results)]
    for scenario in report["scenarios"]:
        rows = [row for row in results if row["scenario"] == scenario]
        if not rows:
            continue
        parts += ["", _heading(scenario, report["workload"], rows), ""]
        if scenario == "churn":
            parts.append(churn_table(rows, _measured(results, "consume", KEY_SHARED)))
        else:
            parts.append(scenario_table(rows, latency=scenario == "latency"))
    order = cost_of_order_table(results)
    if order:
        parts += ["", f"#### cost of order: Key_Shared against Shared, {report['workload']['consumers']}"
                      " consumers each, same workload (rows above)", "", order]
    parts += ["", " ".join(f"![{title}]({path})" for title, path in PLOTS)]
    return "\n".join(parts)


def replace_block(text: str, command: str, block_body: str) -> str:
    """`text` with the block of `command` replaced (or appended when new)."""
    start, end = f"<!-- bench: {command} -->", "<!-- /bench -->"
    block = f"{start}\n{block_body}\n{end}"
    if start in text:
        head, rest = text.split(start, 1)
        return head + block + rest.split(end, 1)[1]
    return text.rstrip("\n") + "\n\n" + block + "\n"
