"""`python -m benchmarks view-pass`: what a compacted view pass costs the event loop.

A view pass runs on a worker thread of the broker (broker/view/store.py).
rocksdict's write keeps the GIL for its whole call, so the broker's event
loop waits while it runs, whatever the switch interval. This
runs real passes over a real RocksDB log shaped like the latency benchmark's
at 10,000 events/s (one record of 10 events per millisecond, keys uniform
over 10,000, 100-byte values; a pass folds one second: 10,000 events, about
6,300 keys) on a worker thread, while the main thread sleeps 0.5 ms at a
time and notes how late it wakes: the wait an event loop would see. The
switch interval is the broker's default (`gil_switch_interval_us`).

Three settings alternate in the same run, `--repeats` times each:
- `one batch`: the pass folds, reads and writes everything in one call each
  (a slice larger than the pass), as before passes came in slices;
- `slices of N, sizes read`: the broker's default slice, with no entry sizes
  remembered (`view_sizes_remembered_max` 0: each pass multi-gets the
  entries it replaces, as before sizes were remembered);
- `slices of N`: the broker's defaults.

Prints a markdown table: per setting, the pass's length and CPU (its
thread's), the main thread's wake-up lateness (p50 / p99 / max) and how
many wake-ups a pass made more than 1 ms late (percentiles of runs of
different lengths compare badly; this count does not). `--no-record` is accepted for
symmetry; nothing is written to RESULTS.md (copy the table with its command).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from typing import Any

from benchmarks import machine
from benchmarks.histogram import figures_ms, of_ms
from benchmarks.measurement import percentile
from broker.config import Settings
from broker.log.rocks_store import Append, RocksStore
from broker.view.sizes import CAPACITY
from broker.view.store import SLICE, ViewStore
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb

EVENTS_PER_RECORD = 10
KEYS = 10_000
NAP_S = 0.0005


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks view-pass", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pass-events", type=int, default=10_000, help="events per pass")
    parser.add_argument("--passes", type=int, default=5, help="passes per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each setting")
    parser.add_argument("--slice", type=int, default=SLICE, help="the sliced setting's slice")
    parser.add_argument("--no-record", action="store_true", help="(nothing is recorded)")
    return parser.parse_args(argv)


def _log(store: RocksStore, events: int, seed: int) -> None:
    rng = random.Random(seed)
    appends = []
    for base in range(0, events, EVENTS_PER_RECORD):
        keys = [rng.randrange(KEYS) for _ in range(EVENTS_PER_RECORD)]
        batch = pb.EventBatch(count=EVENTS_PER_RECORD, key_ints=keys, slots=slots_of(keys),
                              values=[bytes(100)] * EVENTS_PER_RECORD)
        appends.append(Append.of_record(pb.Record(topic="t", partition=0, base_offset=base,
                                                  scn_first=base + 1, publish_time_ms=1,
                                                  batch=batch)))
    store.append(1, 0, appends, {}, 0, 0)


def measure(slice_size: int, remembered: bool, options: argparse.Namespace) -> dict[str, Any]:
    """Passes on a worker thread; the main thread's wake-up lateness meanwhile."""
    events = options.pass_events * (options.passes + 1)
    with tempfile.TemporaryDirectory(prefix="keybus-view-pass-") as tmp:
        store = RocksStore(f"{tmp}/db", fsync=False)
        try:
            _log(store, events, seed=slice_size)
            views = ViewStore(store, slice_size, sizes_capacity=CAPACITY if remembered else 0)
            views.fold_pass(1, 0, options.pass_events, options.pass_events)  # keys exist after
            passes: list[float] = []
            cpu: list[float] = []
            done = threading.Event()

            def work() -> None:
                for n in range(2, options.passes + 2):
                    began, began_cpu = time.perf_counter(), time.thread_time()
                    views.fold_pass(1, 0, n * options.pass_events, options.pass_events)
                    passes.append(time.perf_counter() - began)
                    cpu.append(time.thread_time() - began_cpu)
                    time.sleep(0.02)
                done.set()

            worker = threading.Thread(target=work, name="view pass")
            late: list[float] = []
            worker.start()
            while not done.is_set():
                began = time.perf_counter()
                time.sleep(NAP_S)
                late.append(time.perf_counter() - began - NAP_S)
            worker.join()
        finally:
            store.close()
    return {"slice": slice_size, "remembered": remembered,
            "pass_ms_p50": 1e3 * percentile(sorted(passes), 50),
            "cpu_ms_p50": 1e3 * percentile(sorted(cpu), 50),
            "late_1ms_per_pass": sum(s > 0.001 for s in late) / options.passes,
            "late": figures_ms(of_ms(1e3 * s for s in late))}


def render(runs: list[dict[str, Any]], options: argparse.Namespace, whole: int,
           argv: list[str]) -> str:
    info = machine.describe()
    lines = [f"`python -m benchmarks view-pass {' '.join(argv)}`".replace(" `", "`")
             + f" — {info['date']}, {info['nproc']} cores, {info['cpu']}, Python "
             f"{info['python']}; {options.pass_events:,} events per pass, switch interval "
             f"{sys.getswitchinterval() * 1e6:.0f} µs",
             "", "| setting | pass ms (p50) | pass CPU ms (p50) | main thread wake-up late, "
             "ms: p50 | p99 | max | wake-ups | late > 1 ms, per pass |",
             "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        name = "one batch" if run["slice"] == whole else f"slices of {run['slice']}"
        if not run["remembered"]:
            name += ", sizes read"
        late = run["late"]
        lines.append(f"| {name} | {run['pass_ms_p50']:.0f} | {run['cpu_ms_p50']:.0f} | "
                     f"{late['p50_ms']:.2f} | {late['p99_ms']:.2f} | {late['max_ms']:.2f} | "
                     f"{late['samples']:,} | {run['late_1ms_per_pass']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    sys.setswitchinterval(Settings().gil_switch_interval_us / 1_000_000)
    whole = options.pass_events * 10  # larger than any pass: one call each
    runs = [measure(size, remembered, options) for _ in range(options.repeats)
            for size, remembered in ((whole, True), (options.slice, False), (options.slice, True))]
    print(render(runs, options, whole, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
