"""A broker process that stamps each event's way through it, for `benchmarks/stages.py`.

`python -m benchmarks.stage_trace OUT_JSON [broker options]` runs the real
broker (`broker.main`) after wrapping a few of its methods to note
CLOCK_MONOTONIC nanoseconds (the clock every process on the machine shares)
at each step of the latency path, and writes the notes to OUT_JSON when the
process exits (SIGTERM included):

- ``submit``: a produce request reaches its partition (`Partition.submit`);
- ``decide``: the partition task decided it (offsets assigned), with its
  base offset and count (`append_of`, called once per stored request, in
  broker/partition_write.py);
- ``write`` / ``synced``: the group's WriteBatch starts on the loop
  (`RocksStore.append(sync=False)`) and its WAL fsync returns on the WAL
  syncer thread (`RocksStore.sync_wal`), with the group's offsets and when that
  fsync began on the thread (so its own length is known); with `--no-fsync`,
  ``synced`` when the WriteBatch is written;
- ``publish``: the durable end moved (`Partition.publish`), with the new end;
- ``round``: a dispatcher round starts (`PartitionDispatcher._round`, or
  `_round_now` in a commit);
- ``deliver``: a delivery to a consumer is assembled and queued for its
  stream (`PartitionDispatcher._deliver`), with its lowest and highest offset;
- ``loop_cpu`` and ``task_cpu`` (one note each, last): the event loop's CPU
  per step of the path (loop_cpu.py) and per task (task_cpu.py; left out,
  with its cost of about a µs a task step, when `--no-task-split` follows
  OUT_JSON).

`--round-spin-us=N` after OUT_JSON makes every dispatcher round start with N
µs of busy work on the thread's CPU clock: a dispatcher that much slower, to
measure how much a µs of the commit's path costs the latency (what a faster
dispatcher would save, read the other way).

A diagnostic for benchmarks only: it names private methods, so a rename
breaks it loudly (tests/integration/test_bench_stages.py runs a short slice).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks import loop_cpu, task_cpu

Note = tuple[Any, ...]


def install(notes: list[Note], round_spin_us: int = 0) -> None:
    """Wrap the broker's methods so each step appends a note (see the module docstring);
    each dispatcher round first spins `round_spin_us` µs of thread CPU."""
    import broker.partition as partition_module
    import broker.partition_write as write_module
    from broker.log.rocks_store import RocksStore
    from broker.subscription.dispatcher import PartitionDispatcher

    ns = time.monotonic_ns
    partition_class = partition_module.Partition
    submitted: dict[int, int] = {}
    group: list[tuple[int, int]] = []  # the offsets of the group being written

    submit = partition_class.submit

    def traced_submit(self: Any, request: Any) -> Any:
        submitted[id(request)] = ns()
        return submit(self, request)

    append_of = getattr(write_module, "append_of")  # noqa: B009 (imported there, not exported)

    def traced_append_of(topic: str, index: int, epoch: int, request: Any, decision: Any) -> Any:
        result = decision.result
        notes.append(("decide", result.base_offset, result.count,
                      submitted.pop(id(request), 0), ns()))
        return append_of(topic, index, epoch, request, decision)

    append = RocksStore.append

    def traced_append(self: Any, topic_id: int, index: int, appends: list[Any], *args: Any,
                      **kwargs: Any) -> None:
        if appends:
            group[:] = [(appends[0].base_offset, appends[-1].base_offset + appends[-1].count)]
            notes.append(("write", *group[0], ns()))
        append(self, topic_id, index, appends, *args, **kwargs)
        if appends and not self.durable:  # --no-fsync: no sync_wal follows; written is done
            notes.append(("synced", *group[0], ns()))

    sync_wal = RocksStore.sync_wal

    def traced_sync_wal(self: Any) -> None:
        began = ns()
        sync_wal(self)
        if group:
            notes.append(("synced", *group[0], ns(), began))

    publish = partition_class.publish

    def traced_publish(self: Any) -> None:
        notes.append(("publish", self.clock.next_offset, ns()))
        publish(self)

    def round_starts() -> None:
        notes.append(("round", ns()))
        if round_spin_us:
            spin(round_spin_us)

    round_ = PartitionDispatcher._round

    async def traced_round(self: Any) -> bool:
        round_starts()
        return await round_(self)

    round_now = PartitionDispatcher._round_now

    def traced_round_now(self: Any) -> bool:  # the round a commit runs itself
        round_starts()
        return round_now(self)

    deliver = PartitionDispatcher._deliver

    def traced_deliver(self: Any, consumer: str, events: Any, *args: Any) -> None:
        if len(events):
            notes.append(("deliver", int(events.offsets[0]), int(events.offsets[-1]), ns()))
        deliver(self, consumer, events, *args)

    replaced: list[tuple[Any, str, Callable[..., Any]]] = [
        (partition_class, "submit", traced_submit),
        (write_module, "append_of", traced_append_of),
        (RocksStore, "append", traced_append), (RocksStore, "sync_wal", traced_sync_wal),
        (partition_class, "publish", traced_publish),
        (PartitionDispatcher, "_round", traced_round),
        (PartitionDispatcher, "_round_now", traced_round_now),
        (PartitionDispatcher, "_deliver", traced_deliver)]
    for owner, name, traced in replaced:
        setattr(owner, name, traced)


def spin(us: int) -> None:
    """Busy work for `us` µs of this thread's CPU time."""
    end = time.thread_time_ns() + us * 1000
    while time.thread_time_ns() < end:
        pass


NO_TASK_SPLIT = "--no-task-split"  # after OUT_JSON: no task_cpu.py timing (stages_ab.py)
ROUND_SPIN = "--round-spin-us="  # after OUT_JSON: N µs of busy work a dispatcher round


def main(argv: list[str]) -> int:
    out, broker_argv = argv[0], argv[1:]
    task_split, round_spin_us = True, 0
    while broker_argv and broker_argv[0].startswith((NO_TASK_SPLIT, ROUND_SPIN)):
        option = broker_argv.pop(0)
        if option == NO_TASK_SPLIT:
            task_split = False
        else:
            round_spin_us = int(option.removeprefix(ROUND_SPIN))
    notes: list[Note] = []
    tally = loop_cpu.Tally()
    loop_cpu.install(tally)  # first: the stamps below wrap it, so their cost is not counted
    install(notes, round_spin_us)

    tasks = task_cpu.Tally(lambda: tally.first_s is not None)  # the same span as the steps'

    def dump() -> None:
        with open(out, "w") as f:
            json.dump([*notes, ("loop_cpu", tally.report()), ("task_cpu", tasks.report())], f)

    atexit.register(dump)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the broker replaces it once serving
    import broker.main

    serve = broker.main.serve  # type: ignore[attr-defined]

    async def timed_serve(*args: Any) -> None:  # every task the broker starts is timed
        if task_split:
            task_cpu.install(asyncio.get_running_loop(), tasks)
        await serve(*args)

    broker.main.serve = timed_serve  # type: ignore[attr-defined,assignment]
    return broker.main.main(broker_argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
