"""The comparison's scenarios, run the same way on every system.

- produce: one producer process sends `events` (or for `duration_s`) as fast
  as acknowledgements allow, into an empty stream.
- consume: N consumer processes (a client may fix its own count: Keybus
  Exclusive runs 1, see `client_workload`) drain what produce stored (produced first,
  untimed, when produce is not planned); done when every event is delivered
  and acknowledged. The Keybus end-to-end benchmark measures the same shape.
- latency: a producer at a fixed `rate_per_s` and N consumers at once, on a
  fresh stream; consumers record publish-to-delivery time from the send time
  in each value.
- churn (Keybus only, see keybus_churn.py): N Key_Shared consumers drain a
  stored backlog of `churn_events` while one leaves and another rejoins every
  `churn_period_s`; throughput and how long moved slots wait.

Each system gets one fresh server (temp dir, free port) for all its
scenarios, stopped by PID at the end even on failure; systems run one after
another so none competes with another. A failed or missing part becomes a row
that says why.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.link import Task
from benchmarks.measurement import CompareWorkload, Measurement, summarize
from benchmarks.pacing import events_limit
from benchmarks.progress import progress
from benchmarks.runner import ClientFailed, ClientRun, run_clients
from benchmarks.systems import Client, Server, System

PRODUCE, CONSUME, LATENCY, CHURN = "produce", "consume", "latency", "churn"
SCENARIOS = (PRODUCE, CONSUME, LATENCY, CHURN)
STORED_STREAM, LATENCY_STREAM = "stored", "paced"
CHURN_LABEL = "Keybus Key_Shared, churn"

Row = dict[str, Any]


@dataclass(frozen=True)
class Plan:
    workload: CompareWorkload
    scenarios: tuple[str, ...] = SCENARIOS
    show_progress: bool = True


def run_system(system: System, plan: Plan) -> tuple[list[Row], Row]:
    """Rows of every planned scenario on `system`, and what ran (version, durability)."""
    info: Row = {"system": system.name, "durability": system.durability, "version": "not run"}
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="keybus-compare-") as tmp:
        try:
            with system.server(Path(tmp)) as server:
                info["version"] = server.version
                _scenarios(system, server, plan, rows)
        except Exception as error:  # reported as rows; the other systems still run
            reason = f"failed: {type(error).__name__}: {_first_line(str(error))}"
            rows += [_note_row(system.name, label, scenario, reason)
                     for label, scenario in _planned(system, plan)
                     if not any(r["system"] == label and r["scenario"] == scenario for r in rows)]
    rows += [_note_row(system.name, label, scenario, f"pending: {reason}")
             for label, reason in system.pending for scenario in plan.scenarios
             if scenario not in (PRODUCE, CHURN)]
    return rows, info


def _planned(system: System, plan: Plan) -> list[tuple[str, str]]:
    planned = [(system.name, PRODUCE)] if PRODUCE in plan.scenarios else []
    planned += [(CHURN_LABEL, CHURN)] if CHURN in plan.scenarios and system.churn else []
    return planned + [(client.label, scenario) for client in system.clients
                      for scenario in plan.scenarios if scenario in (CONSUME, LATENCY)]


def _scenarios(system: System, server: Server, plan: Plan, rows: list[Row]) -> None:
    """Append each scenario's row as it finishes (a later failure keeps earlier rows)."""
    consume = CONSUME in plan.scenarios and bool(system.clients)
    if PRODUCE in plan.scenarios or consume:
        system.create_stream(server.address, STORED_STREAM, plan.workload)
        produced = measure(system, server, PRODUCE, None, STORED_STREAM, plan)
        if PRODUCE in plan.scenarios:
            rows.append(produced)
        for client in system.clients if consume else ():
            rows.append(_consume(system, server, client, produced, plan))
        system.drop_stream(server.address, STORED_STREAM)
    for client in system.clients if LATENCY in plan.scenarios else ():
        system.create_stream(server.address, LATENCY_STREAM, plan.workload)
        rows.append(measure(system, server, LATENCY, client, LATENCY_STREAM, plan))
        system.drop_stream(server.address, LATENCY_STREAM)
    if CHURN in plan.scenarios and system.churn is not None:
        rows.append(system.churn(server, plan.workload, plan.show_progress))


def _consume(system: System, server: Server, client: Client, produced: Row, plan: Plan) -> Row:
    if not produced.get("complete") or not produced.get("events"):
        return _note_row(system.name, client.label, CONSUME,
                         f"not run: storing the events failed ({produced.get('note', 'incomplete')})")
    return measure(system, server, CONSUME, client, STORED_STREAM, plan, stored=produced["events"])


def measure(system: System, server: Server, scenario: str, client: Client | None, stream: str,
            plan: Plan, stored: int = 0) -> Row:
    """One scenario's clients on an existing stream, summarized as a row."""
    workload = client_workload(plan.workload, client)
    label = client.label if client else system.name
    task = Task(server.address, stream, workload, paced=scenario == LATENCY)
    producer = None if scenario == CONSUME else system.produce
    total = stored if scenario == CONSUME else (
        events_limit(workload, task.paced) if task.paced or workload.duration_s is None else None)
    try:
        if client is not None:
            client.prepare(server.address, stream, workload)
        bar = progress(f"{label}: {scenario}", total, plan.show_progress)
        try:
            run = run_clients(producer, client.consume if client else None, task, server.pid, bar,
                              stored)
        finally:
            bar.close()
    except ClientFailed as error:
        print(f"{label}, {scenario}: {error}", file=sys.stderr)
        return _note_row(system.name, label, scenario, f"failed: {_last_line(str(error))}")
    return _row(system, label, scenario, run, workload, consumers=bool(client))


def client_workload(workload: CompareWorkload, client: Client | None) -> CompareWorkload:
    """The workload `client` runs: its own consumer count when it has one (Exclusive: 1)."""
    if client is None or client.consumers is None or client.consumers == workload.consumers:
        return workload
    return replace(workload, consumers=client.consumers)


def _row(system: System, label: str, scenario: str, run: ClientRun, workload: CompareWorkload,
         consumers: bool) -> Row:
    row = summarize(Measurement(
        system=label, scenario=scenario, events=run.events, seconds=run.seconds,
        client_cpu_s=run.client_cpu_s, server_cpu_s=run.server_cpu_s,
        value_bytes=workload.value_bytes, consumers=workload.consumers if consumers else 0,
        latencies_ms=run.latencies_ms, complete=run.complete))
    row["family"] = system.name
    if run.server_window_s > 0 and run.events:
        row["server_main_thread"] = {
            "cores": round(run.server_main_thread_cpu_s / run.server_window_s, 3),
            "cpu_s_per_m": round(run.server_main_thread_cpu_s / run.events * 1e6, 2)}
    stages = _stages(run.reports)
    if stages:
        row["stages"] = stages
    return row


def _stages(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Latency split into stages, when the consumers measured it (Keybus: at the broker's
    commit start), as HdrHistogram figures per stage."""
    from benchmarks import histogram

    combined: dict[str, list[float]] = {}
    for report in reports:
        for name, values in (report.get("stages_ms") or {}).items():
            combined.setdefault(name, []).extend(values)
    return {name: histogram.figures_ms(histogram.of_ms(values))
            for name, values in combined.items() if values}


def _note_row(family: str, label: str, scenario: str, note: str) -> Row:
    return {"system": label, "family": family, "scenario": scenario, "note": note}


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else "no message"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"


def run_all(systems: list[Callable[[], System]], plan: Plan) -> tuple[list[Row], list[Row]]:
    """Every system in turn, one server at a time."""
    rows: list[Row] = []
    infos: list[Row] = []
    for make in systems:
        system_rows, info = run_system(make(), plan)
        rows += system_rows
        infos.append(info)
    return rows, infos
