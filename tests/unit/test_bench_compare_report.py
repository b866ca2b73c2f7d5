"""The comparison's Markdown: tables per scenario, Keybus/peer ratios, blocks.

Goal: ratios compare each row with the scenario's Keybus row (events/s for
throughput, p99 for latency); failed and pending rows say why; a rerun
replaces its own generated block and keeps everything else.
Method: hand-built report dicts; string checks on the output.
"""

from __future__ import annotations

from typing import Any

from benchmarks.compare_report import body, ratio, replace_block, scenario_table


def _row(system: str, family: str, scenario: str, events_per_s: int, **extra: Any) -> dict[str, Any]:
    return {"system": system, "family": family, "scenario": scenario, "events": 1_000_000,
            "events_per_s": events_per_s, "mb_per_s": events_per_s * 100 / 1e6,
            "cpu_s_per_m_client": 2.0, "cpu_s_per_m_server": 1.0, "complete": True, **extra}


def test_ratio_formats_and_handles_missing_sides() -> None:
    assert ratio(500_000, 200_000) == "2.50x"
    assert ratio(None, 3) == "—"
    assert ratio(3, 0) == "—"


def test_throughput_ratio_is_keybus_over_each_system() -> None:
    rows = [_row("Keybus", "Keybus", "produce", 600_000),
            _row("Redis Streams", "Redis Streams", "produce", 200_000),
            _row("NATS JetStream", "NATS JetStream", "produce", 30_000, complete=False)]
    table = scenario_table(rows, latency=False)
    lines = table.splitlines()
    assert lines[2].endswith("| 1.00x |")
    assert lines[3].startswith("| Redis Streams |") and lines[3].endswith("| 3.00x |")
    assert "(incomplete)" in lines[4] and lines[4].endswith("| 20.00x |")


def test_latency_ratio_is_each_p99_over_keybus_p99() -> None:
    rows = [_row("Keybus Key_Shared", "Keybus", "latency", 10_000, p50_ms=1.0, p99_ms=2.0,
                 max_ms=3.0, consumers=4),
            _row("Redis consumer group", "Redis Streams", "latency", 10_000, p50_ms=0.5,
                 p99_ms=5.0, max_ms=9.0, consumers=4)]
    lines = scenario_table(rows, latency=True).splitlines()
    assert lines[3].endswith("| 2.50x |") and "| 0.50 | 5.00 |" in lines[3]


def test_without_a_keybus_row_there_is_no_ratio_and_notes_are_rows() -> None:
    rows = [{"system": "Keybus Key_Shared", "family": "Keybus", "scenario": "consume",
             "note": "pending: not there yet"},
            _row("Redis consumer group", "Redis Streams", "consume", 100_000, consumers=4)]
    lines = scenario_table(rows, latency=False).splitlines()
    assert lines[2].startswith("| Keybus Key_Shared | pending: not there yet | — |")
    assert lines[3].endswith("| — |")


def test_body_states_durability_machine_and_plots() -> None:
    report = {
        "command": "python -m benchmarks compare --events 10",
        "machine": {"date": "2026-11-22", "nproc": 2, "cpu": "CPU", "python": "3.11.7"},
        "workload": {"events": 10, "duration_s": None, "value_bytes": 100, "keys": 10_000,
                     "batch_events": 1_000, "consumers": 4, "rate_per_s": 10_000,
                     "latency_events": 100},
        "scenarios": ["produce", "consume", "latency"],
        "systems": [{"system": "Redis Streams", "version": "v7", "durability": "everysec"}],
        "results": [_row("Redis Streams", "Redis Streams", "produce", 100)],
    }
    text = body(report)
    assert text.startswith("`python -m benchmarks compare --events 10` — 2026-11-22, 2 cores")
    assert "| Redis Streams | v7 | everysec |" in text
    assert "#### produce" in text and "#### consume" not in text
    assert "(plots/throughput.png)" in text and "(plots/latency.png)" in text


def test_replace_block_replaces_only_its_own_command() -> None:
    text = ("# Results\n\nnotes\n\n<!-- bench: a -->\nold a\n<!-- /bench -->\n\n"
            "<!-- bench: b -->\nold b\n<!-- /bench -->\n\ntail notes\n")
    updated = replace_block(text, "a", "new a")
    assert "new a" in updated and "old a" not in updated
    assert "old b" in updated and updated.endswith("tail notes\n") and "notes\n\n<!--" in updated
    appended = replace_block(updated, "c", "new c")
    assert appended.endswith("<!-- bench: c -->\nnew c\n<!-- /bench -->\n")


def test_targets_table_states_each_ratio_met_or_short() -> None:
    from benchmarks.compare_report import targets_table

    rows = [_row("Keybus", "Keybus", "produce", 500_000),
            _row("Redis Streams", "Redis Streams", "produce", 100_000),
            _row("Keybus Key_Shared", "Keybus", "consume", 150_000),
            _row("Redis consumer group", "Redis Streams", "consume", 200_000)]
    lines = targets_table(rows).splitlines()
    assert "**5.00x**" in lines[2] and lines[2].endswith("| met |")
    assert "**0.75x**" in lines[3] and "short (75% of the target)" in lines[3]
    assert lines[4].endswith("| not measured |")  # no NATS row


def test_cost_of_order_compares_key_shared_with_shared() -> None:
    from benchmarks.compare_report import cost_of_order_table

    rows = [_row("Keybus Key_Shared", "Keybus", "consume", 300_000),
            _row("Keybus Shared", "Keybus", "consume", 600_000),
            _row("Keybus Key_Shared", "Keybus", "latency", 10_000, p50_ms=2.0, p99_ms=8.0),
            _row("Keybus Shared", "Keybus", "latency", 10_000, p50_ms=1.5, p99_ms=4.0)]
    table = cost_of_order_table(rows)
    assert table is not None
    consume, latency = table.splitlines()[2:]
    assert consume.startswith("| consume | 300,000 | 600,000 | 0.50x |")
    assert "| 2.00 / 8.00 | 1.50 / 4.00 |" in latency
    assert cost_of_order_table(rows[:1]) is None


def test_churn_table_compares_with_its_own_steady_drains_and_steady_key_shared() -> None:
    from benchmarks.compare_report import churn_table
    from benchmarks.keybus_churn import steady_figures
    from benchmarks.runner import ClientRun

    steady = _row("Keybus Key_Shared", "Keybus", "consume", 400_000)
    row = _row("Keybus Key_Shared, churn", "Keybus", "churn", 300_000, consumers=4,
               membership_changes=9, join_wait_p50_ms=40.0, join_wait_max_ms=95.5,
               waiting_slots_max=120, waiting_events_max=20_000)
    line = churn_table([row], steady).splitlines()[2]
    assert "| 9 | 40.0 / 95.5 | 120 / 20,000 | — | 0.75x |" in line
    row.update(steady_figures([ClientRun(200_000, 0.5, 0, 0.3, [], True),
                               ClientRun(200_000, 1.0, 0, 0.3, [], True)]))
    assert row["steady_events_per_s"] == 300_000 and row["steady_cpu_s_per_m_server"] == 1.5
    line = churn_table([row], steady).splitlines()[2]
    assert "| 1.00x (400,000 / 200,000) | 0.75x |" in line
    failed = {"system": "Keybus Key_Shared, churn", "scenario": "churn", "note": "failed: x"}
    assert "failed: x" in churn_table([failed], None)


def test_the_recorded_command_leaves_out_display_only_flags() -> None:
    from benchmarks.compare import recorded_command

    assert recorded_command(["--no-progress", "--no-plots"]) == "python -m benchmarks compare"
    assert recorded_command(["--events", "10", "--no-progress"]) == \
        "python -m benchmarks compare --events 10"
