"""Where Keybus's end-to-end subscription scenarios plug into the comparison.

The subscription work adds a module per subscription type (listed in
`SUBSCRIPTIONS`; the first is `benchmarks/e2e_key_shared.py`) with two
functions; nothing else here needs to change:

    def prepare(address: str, topic: str, workload: CompareWorkload) -> None
        Runs in the parent process after the harness created `topic` (1
        partition) and before any consumer starts: create the subscription
        so that consumers receive every event from offset 0. In the consume
        scenario the topic already holds the events the produce scenario
        stored; in the latency scenario it is empty and the producer starts
        with the consumers.

    def consume(task: Task, link: Link) -> dict[str, Any]
        Runs in each consumer process (spawned `workload.consumers` times,
        `task.index` 0..n-1; `task.address` is the broker, `task.stream` the
        topic). Subscribe, then return `client_loops.consume_async(task, link,
        fetch)` (or the sync `consume`), where `fetch()` receives one batch,
        reads `monotonic_ns()` as it arrives, acknowledges it and returns
        (values, arrival_ns), or ([], 0) after a bounded wait with nothing to
        deliver. The loop counts, records latencies when `task.paced`, and
        stops when every produced event is consumed or the deadline passes
        (so a consumer that receives nothing, a Failover standby, ends too).

    CONSUMERS: int  (optional)
        How many consumer processes this type always runs, whatever
        `workload.consumers` says (Exclusive admits only one: 1).

The harness supplies the broker (fsync before ack), the topic, the SDK
producer process, timing, CPU accounting and the tables and plots.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from benchmarks.systems import Client

SUBSCRIPTIONS: tuple[tuple[str, str], ...] = (
    ("Keybus Key_Shared", "benchmarks.e2e_key_shared"),
    ("Keybus Shared", "benchmarks.e2e_shared"),
    ("Keybus Exclusive (1 consumer)", "benchmarks.e2e_exclusive"),
    ("Keybus Failover (1 active, others standby)", "benchmarks.e2e_failover"),
)


@dataclass(frozen=True)
class Loaded:
    """The subscription types that are there, and why the others are not."""

    clients: tuple[Client, ...]
    pending: tuple[tuple[str, str], ...]


def load(subscriptions: tuple[tuple[str, str], ...] = SUBSCRIPTIONS) -> Loaded:
    clients: list[Client] = []
    pending: list[tuple[str, str]] = []
    for label, module_name in subscriptions:
        try:
            module = importlib.import_module(module_name)
        except Exception as error:  # work in progress elsewhere: a pending row says why
            missing = isinstance(error, ModuleNotFoundError) and error.name == module_name
            pending.append((label, f"{module_name} is not there yet" if missing
                            else f"importing {module_name} failed: {type(error).__name__}: {error}"))
            continue
        prepare, consume = getattr(module, "prepare", None), getattr(module, "consume", None)
        if prepare is None or consume is None:
            pending.append((label, f"{module_name} has no prepare() and consume() "
                                   "(see benchmarks/keybus_e2e.py)"))
            continue
        clients.append(Client(label, prepare, consume, getattr(module, "CONSUMERS", None)))
    return Loaded(tuple(clients), tuple(pending))
