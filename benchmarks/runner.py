"""Run one scenario's clients: a producer process, N consumer processes, or both.

Each client is spawned (no asyncio loop, thread or gRPC channel inherited),
connects, says it is ready and waits for one start signal (`Link.start`),
then measures its own CPU from /proc/self/stat around its work only, and
reports through a queue. The parent
reads the server's CPU before and after, follows progress from the shared
counters, stops everything at the deadline or on the first failure, and ends
each process it started by its handle (its PID).
"""

from __future__ import annotations

import multiprocessing
import queue
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.process import BaseProcess
from typing import Any

from benchmarks.cpu import main_thread_cpu_s, process_cpu_s
from benchmarks.link import STOP_GRACE_S, Link, Task, monotonic_ns
from benchmarks.progress import Progress

Worker = Callable[[Task, Link], dict[str, Any]]
START_TIMEOUT_S = 60.0  # spawning and importing a client, connecting to the server


class ClientFailed(RuntimeError):
    """A client process raised: the message carries its traceback."""


@dataclass
class ClientRun:
    """What the clients of one scenario reported, combined."""

    events: int
    seconds: float
    client_cpu_s: float
    server_cpu_s: float
    latencies_ms: list[float]
    complete: bool
    reports: list[dict[str, Any]] = field(default_factory=list)  # each process's, as sent
    # the server's main thread (a Python server's event loop): its CPU, and the wall time
    # over which both server figures were read
    server_main_thread_cpu_s: float = 0.0
    server_window_s: float = 0.0


def _client_main(worker: Worker, task: Task, link: Link, role: str) -> None:
    """Entry point of a client process: the worker connects, calls link.start(), works."""
    try:
        report = worker(task, link)
        report["error"] = None
    except BaseException:
        report = {"error": traceback.format_exc()}
        link.say_ready_if_not_started()
    started_s = link.cpu_start_s
    report.update(role=role, cpu_s=process_cpu_s() - started_s if started_s is not None else 0.0)
    link.reports.put(report)


def run_clients(producer: Worker | None, consumer: Worker | None, task: Task,
                server_pid: int | None, progress: Progress, stored: int = 0) -> ClientRun:
    """Run a producer and/or `task.workload.consumers` consumers.

    Without a producer the consumers drain `stored` events already in the stream.
    """
    assert producer is not None or consumer is not None
    context = multiprocessing.get_context("spawn")
    link = Link(context)
    roles: list[tuple[str, Worker, Task]] = []
    if producer is None:
        link.prefill(stored)
    else:
        roles.append(("producer", producer, task))
    if consumer is not None:
        roles += [(f"consumer-{i}", consumer, replace(task, index=i))
                  for i in range(task.workload.consumers)]
    processes = [context.Process(target=_client_main, args=(worker, role_task, link, role),
                                 name=f"bench-{role}", daemon=True)
                 for role, worker, role_task in roles]
    for process in processes:
        process.start()
    try:
        _wait_ready(link, processes)
        server_before_s = process_cpu_s(server_pid) if server_pid else 0.0
        main_before_s = main_thread_cpu_s(server_pid) if server_pid else 0.0
        go_ns = monotonic_ns()
        link.go.set()
        counter = (lambda: link.consumed) if consumer is not None else (lambda: link.produced)
        reports = _collect(link, processes, task.workload.deadline_s, progress, counter)
        server_cpu_s = process_cpu_s(server_pid) - server_before_s if server_pid else 0.0
        main_cpu_s = main_thread_cpu_s(server_pid) - main_before_s if server_pid else 0.0
        window_s = (monotonic_ns() - go_ns) / 1e9
    finally:
        link.stop.set()
        _end(processes)
    reported = {report["role"] for report in reports}
    silent = [f"{p.name} (exit code {p.exitcode})" for p in processes
              if p.name.removeprefix("bench-") not in reported]
    if silent:
        raise ClientFailed("client processes ended without a report: " + ", ".join(silent))
    run = _combine(reports, go_ns, server_cpu_s, counted="consumer" if consumer else "producer",
                   expected=len(processes), stored=stored)
    run.server_main_thread_cpu_s, run.server_window_s = main_cpu_s, window_s
    return run


def _wait_ready(link: Link, processes: Sequence[BaseProcess]) -> None:
    for _ in processes:
        if not link.ready.acquire(timeout=START_TIMEOUT_S):
            raise ClientFailed(f"a client process did not start within {START_TIMEOUT_S:.0f} s")


def _collect(link: Link, processes: Sequence[BaseProcess], deadline_s: float, progress: Progress,
             counter: Callable[[], int]) -> list[dict[str, Any]]:
    """Reports of every process, or what came before the deadline plus a grace period,
    or before every process was gone (one that died without reporting)."""
    reports: list[dict[str, Any]] = []
    deadline = time.monotonic() + deadline_s
    while len(reports) < len(processes) and time.monotonic() < deadline + STOP_GRACE_S:
        if time.monotonic() > deadline:
            link.stop.set()
        try:
            report = link.reports.get(timeout=0.2)
        except queue.Empty:
            report = None
            if not any(process.is_alive() for process in processes):
                link.stop.set()
                break
        progress.advance_to(counter())
        if report is not None:
            reports.append(report)
            if report["error"]:
                link.stop.set()
    progress.advance_to(counter())
    return reports


def _end(processes: Sequence[BaseProcess]) -> None:
    """Join each client; terminate, then kill, one that does not end."""
    for process in processes:
        process.join(STOP_GRACE_S)
        if process.is_alive():
            process.terminate()
            process.join(5)
        if process.is_alive():
            process.kill()
            process.join(5)


def _combine(reports: list[dict[str, Any]], go_ns: int, server_cpu_s: float, counted: str,
             expected: int, stored: int) -> ClientRun:
    errors = [f"{r['role']}: {r['error']}" for r in reports if r["error"]]
    if errors:
        raise ClientFailed("\n".join(errors))
    counted_reports = [r for r in reports if r["role"].startswith(counted)]
    last_ns = max((r["last_ns"] for r in counted_reports), default=go_ns)
    latencies: list[float] = []
    for r in counted_reports:
        latencies.extend(r.get("latencies_ms", ()))
    events = sum(r["events"] for r in counted_reports)
    produced = next((r["events"] for r in reports if r["role"] == "producer"), stored)
    complete = (len(reports) == expected and events >= produced
                and not any(r.get("stopped_early") for r in reports))
    return ClientRun(events=events, seconds=max(last_ns - go_ns, 1) / 1e9,
                     client_cpu_s=sum(r["cpu_s"] for r in reports), server_cpu_s=server_cpu_s,
                     latencies_ms=latencies, complete=complete, reports=reports)
