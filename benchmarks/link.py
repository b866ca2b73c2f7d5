"""What one scenario's client processes share: a task, counters and signals.

The producer adds what it sent to `produced` (or the parent prefills it with
what is already stored); consumers add what they delivered and acknowledged to
`consumed`. A consumer is done when the producer has finished and `consumed`
has caught up; everyone is done when the parent
sets `stop` (deadline or a failed process). Built from a spawn context, so it
passes to child processes as a `Process` argument.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from multiprocessing.context import SpawnContext
from typing import Any

from benchmarks.cpu import process_cpu_s
from benchmarks.measurement import CompareWorkload

STOP_GRACE_S = 15.0  # a client process outlives the deadline by at most this


@dataclass(frozen=True)
class Task:
    """What a client process works on: server address, stream/topic name, workload.

    paced: the latency scenario (send at `workload.rate_per_s`, record latencies).
    index: the consumer's number, 0.. (the producer is 0 too).
    """

    address: str
    stream: str
    workload: CompareWorkload
    paced: bool = False
    index: int = 0

    def hard_stop_monotonic(self, began_s: float) -> float:
        """When this client stops by itself, even if the parent is gone."""
        return began_s + self.workload.deadline_s + STOP_GRACE_S


class Link:
    """Counters and signals shared across the processes of one scenario."""

    def __init__(self, context: SpawnContext) -> None:
        self._produced = context.Value("q", 0)
        self._consumed = context.Value("q", 0)
        self._producer_done = context.Event()
        self.stop = context.Event()
        self.go = context.Event()
        self.ready = context.Semaphore(0)
        self.reports: Any = context.Queue()
        self.cpu_start_s: float | None = None  # set by start() in the client's own process

    def add_produced(self, n: int) -> None:
        with self._produced.get_lock():
            self._produced.value += n

    def add_consumed(self, n: int) -> None:
        with self._consumed.get_lock():
            self._consumed.value += n

    @property
    def produced(self) -> int:
        return int(self._produced.value)

    @property
    def consumed(self) -> int:
        return int(self._consumed.value)

    def finish_producing(self) -> None:
        self._producer_done.set()

    def prefill(self, events: int) -> None:
        """Consumers drain `events` already stored: no producer runs."""
        self.add_produced(events)
        self.finish_producing()

    def stopped(self) -> bool:
        return self.stop.is_set()

    def consumption_done(self) -> bool:
        """Every produced event has been delivered and acknowledged."""
        return self._producer_done.is_set() and self.consumed >= self.produced

    def start(self, timeout_s: float = 60.0) -> None:
        """Called by a client once connected: say ready, wait for the common start.

        Connecting and subscribing stay outside the measured time and CPU, and
        in the latency scenario every consumer is attached before the first send.
        """
        self.ready.release()
        self.cpu_start_s = process_cpu_s()  # this process's copy of the link only
        if not self.go.wait(timeout_s):
            raise RuntimeError(f"no start signal within {timeout_s:.0f} s")
        self.cpu_start_s = process_cpu_s()

    def say_ready_if_not_started(self) -> None:
        """A client that failed before `start` still counts as ready, so nobody waits."""
        if self.cpu_start_s is None:
            self.ready.release()


def monotonic_ns() -> int:
    """The one clock every process reads for latencies and scenario times."""
    return time.monotonic_ns()
