"""`python -m benchmarks soak`: one broker under steady load and consumer churn for minutes.

What a short test cannot show: resources that grow with time (memory, file
descriptors, threads), a consumer that stops getting events after many
membership changes, events lost while retention cuts the log under readers.

One real broker process (127.0.0.1, temp data dir, fsync on, metrics on,
retention every second), one topic of `--partitions` partitions with
`--retention-bytes` per partition (small: retention removes records during the
run, but large enough that the consumers keep up), and on one event loop:

- a producer (SDK `Producer`) at `--rate` events/s, keys over `--keys` keys;
- `--consumers` Key_Shared consumers (SDK `Consumer`); every `--churn-s` the
  oldest leaves and a new one joins (every other leaver drops its last batch
  unacknowledged, so redelivery is exercised);
- a Shared subscription of two consumers, and a follow reader per partition.

Every `--sample-s` it samples the broker's RSS, open file descriptors and
threads (/proc), both subscriptions' backlog, the readers' lag and the
dispatchers' caches (metrics). After `--minutes` the producer stops and the
backlog must drain within `--drain-s`. Then it checks: every acknowledged
produce reached both subscriptions and was acknowledged there at least once,
unless retention removed it first (counted apart, and a failure too: the
retention is sized so that the consumers keep up); per-key order within each
Key_Shared consumer session; readers without gaps; FDs and threads after the
drain within a slack of their warm-up level (the first half). RocksDB keeps
every table file (.sst) open, and each memtable flush adds some until
compaction merges them: those descriptors are counted apart (a column of the
table, their growth reported) and left out of the check. RSS growth per minute
over the second half is reported with its range there (memtables fill and
flush: RSS is a sawtooth, so the slope depends on the phase). Prints the table and the verdict;
exits 1 with one line naming what failed. Nothing is written to RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import machine
from benchmarks.broker import running_broker
from benchmarks.memory import cache_bytes, resident_mb
from benchmarks.soak_clients import KEY_SHARED, SHARED, TOPIC, Clients, Plan
from benchmarks.soak_ledger import Ledger, Sample, second_half_slopes, warm_level
from keybus.dev_cluster import free_port
from sdk import Admin, Producer

FD_SLACK = 8  # descriptors: a churning consumer's connection may be open or not
THREAD_SLACK = 4


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="of producing")
    parser.add_argument("--rate", type=int, default=2_000, help="events/s")
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=3, help="Key_Shared, at a time")
    parser.add_argument("--churn-s", type=float, default=5.0)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--drain-s", type=float, default=60.0)
    parser.add_argument("--retention-bytes", type=int, default=4 << 20, help="per partition")
    return parser.parse_args(argv)


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise RuntimeError(f"no Threads line for process {pid}")


def fd_kinds(pid: int) -> dict[str, int]:
    """Open descriptors of process `pid` by kind: sockets, pipes, anon inodes, and files
    by suffix (RocksDB keeps every .sst open: more files, more descriptors)."""
    kinds: dict[str, int] = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        path = Path(target)
        kind = target.split(":", 1)[0] if not target.startswith("/") else \
            "directory" if path.is_dir() else path.suffix or path.name.split("-")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    return dict(sorted(kinds.items()))


class Soak:
    """One run: the broker's pid and metrics address, the clients, the samples."""

    def __init__(self, address: str, pid: int, metrics: str, plan: Plan) -> None:
        self.address, self.pid, self.metrics, self.plan = address, pid, metrics, plan
        self.ledger = Ledger(plan.partitions)
        self.clients = Clients(address, plan, self.ledger)
        self.samples: list[Sample] = []
        self.began = time.monotonic()
        self.drained_s: float | None = None
        self.start_offsets: list[int] = []
        self.fd_kinds: list[dict[str, int]] = []  # before the producer, after the drain

    async def backlogs(self, admin: Admin) -> tuple[int, int]:
        found = []
        for subscription in (KEY_SHARED, SHARED):
            info = await admin.describe_subscription(TOPIC, subscription)
            found.append(sum(p.backlog for p in info.partitions))
        return found[0], found[1]

    async def sample(self, admin: Admin) -> Sample:
        kinds, threads = fd_kinds(self.pid), threads_of(self.pid)
        key_shared, shared = await self.backlogs(admin)
        cached = await asyncio.to_thread(cache_bytes, self.metrics)
        sample = Sample(round(time.monotonic() - self.began, 1), resident_mb(self.pid),
                        sum(kinds.values()), kinds.get(".sst", 0), threads, key_shared,
                        shared, self.clients.reader_lag(), self.ledger.acked_events,
                        cached / 2**20 if cached >= 0 else -1.0)
        self.samples.append(sample)
        return sample

    async def sampling(self, admin: Admin) -> None:
        while True:
            await asyncio.sleep(self.plan.sample_s)
            await self.sample(admin)

    async def drain(self, admin: Admin) -> None:
        """Wait (up to drain_s) for both backlogs and the readers' lag to reach 0."""
        began = time.monotonic()
        while time.monotonic() - began < self.plan.drain_s:
            if await self.backlogs(admin) == (0, 0) and self.clients.reader_lag() == 0:
                self.drained_s = time.monotonic() - began
                return
            await asyncio.sleep(0.2)

    async def run(self) -> None:
        plan = self.plan
        async with Admin(self.address) as admin:
            await admin.create_topic(TOPIC, partitions=plan.partitions,
                                     retention_bytes=plan.retention_bytes, view=False)
            await self.clients.start()
            self.began = time.monotonic()
            await self.sample(admin)
            self.fd_kinds.append(fd_kinds(self.pid))
            sampler = asyncio.create_task(self.sampling(admin))
            churn = asyncio.create_task(self.clients.churn())
            try:
                async with await Producer.create(self.address, TOPIC) as producer:
                    await self.clients.produce(producer)
            finally:
                churn.cancel()
                sampler.cancel()
                await asyncio.gather(churn, sampler, return_exceptions=True)
            await self.drain(admin)
            await asyncio.sleep(1.0)  # closed streams and channels settle
            await self.sample(admin)
            self.fd_kinds.append(fd_kinds(self.pid))
            info = await admin.describe_topic(TOPIC)
            self.start_offsets = [p.start_offset for p in
                                  sorted(info.partitions, key=lambda p: p.partition)]
            await self.clients.stop()


def verdict(soak: Soak) -> list[str]:
    """What failed, one line each (empty: all checks passed)."""
    plan, tally, samples = soak.plan, soak.clients.tally, soak.samples
    failed = [f"client error: {e}" for e in tally.errors[:1]]
    if tally.send_failures:
        failed.append(f"{tally.send_failures} produces failed")
    for subscription in (KEY_SHARED, SHARED):
        lost, removed, examples = soak.ledger.missing(subscription, soak.start_offsets)
        if lost:
            failed.append(f"{lost} acknowledged events never delivered to {subscription} "
                          f"(partition/offset: {examples})")
        if removed:
            failed.append(f"retention removed {removed} events before {subscription} got "
                          "them (the consumers fell behind the retention)")
    failed += [f"per-key order: {o.violation}" for o in tally.orders if o.violation][:1]
    if soak.drained_s is None:
        failed.append(f"backlog not drained within {plan.drain_s:.0f} s after the producer "
                      f"stopped (stuck consumer): last sample {samples[-1]}")
    if not any(soak.start_offsets):
        failed.append("retention removed nothing: lower --retention-bytes or raise --rate")
    half = plan.seconds / 2
    final = samples[-1]
    for field, slack, what in (("other_fds", FD_SLACK, "file descriptors (besides .sst)"),
                               ("threads", THREAD_SLACK, "threads")):
        level = warm_level(samples, half, field)
        if getattr(final, field) > level + slack:
            failed.append(f"broker {what} grew: {getattr(final, field)} after the drain, "
                          f"{level:.0f} during warm-up (slack {slack})")
    return failed


def report(soak: Soak, elapsed_s: float) -> str:
    plan, tally = soak.plan, soak.clients.tally
    info = machine.describe()
    slopes = second_half_slopes(soak.samples, plan.seconds / 2, plan.seconds + plan.sample_s)
    late = [s.rss_mb for s in soak.samples if s.at_s >= plan.seconds / 2] or [0.0]
    drained = "not drained" if soak.drained_s is None else f"{soak.drained_s:.1f} s"
    lines = [
        f"{info['date']}, {info['nproc']} cores ({info['cpu']}), 1-min load average "
        f"{os.getloadavg()[0]:.2f} after the run, which took {elapsed_s:.0f} s", "",
        "| t s | RSS MB | FDs (.sst) | threads | Key_Shared backlog | Shared backlog | reader lag "
        "| acked events | dispatch caches MB |",
        "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {s.at_s:.0f} | {s.rss_mb:.0f} | {s.fds} ({s.sst_fds}) | {s.threads} "
              f"| {s.key_shared_backlog:,} | {s.shared_backlog:,} | {s.reader_lag:,} "
              f"| {s.acked_events:,} | {s.cache_mb:.1f} |" for s in soak.samples]
    lines += ["", f"Growth per minute over the second half: RSS {slopes['rss_mb']:+.2f} MB, "
              f"FDs {slopes['fds']:+.2f} (.sst {slopes['sst_fds']:+.2f}), "
              f"threads {slopes['threads']:+.2f}; RSS there "
              f"{min(late):.0f}-{max(late):.0f} MB.",
              "Broker descriptors by kind, before the producer and after the drain: "
              + " / ".join(", ".join(f"{k} {n}" for k, n in kinds.items())
                           for kinds in soak.fd_kinds) + ".",
              f"Acknowledged produces {soak.ledger.acked_events:,}; Key_Shared sessions "
              f"{tally.sessions} (left unacknowledged {tally.dropped_unacked:,} events, "
              f"redeliveries {tally.redelivered:,}); Shared deliveries "
              f"{tally.shared_events:,}; reader events {tally.reader_events:,}; retention "
              f"removed offsets below {soak.start_offsets}; backlog drained in {drained}."]
    return "\n".join(lines)


def run(args: argparse.Namespace, out: Callable[[str], None] = print) -> list[str]:
    """Run the soak; print its table and verdict; return what failed."""
    plan = Plan(seconds=args.minutes * 60, rate=args.rate, keys=args.keys,
                value_bytes=args.value_bytes, partitions=args.partitions,
                consumers=args.consumers, churn_s=args.churn_s, sample_s=args.sample_s,
                drain_s=args.drain_s, retention_bytes=args.retention_bytes)
    metrics = f"127.0.0.1:{free_port()}"
    began = time.monotonic()
    with running_broker("--fsync", "--no-view-default", "--metrics-port",
                        metrics.split(":")[1], "--retention-check-interval-ms", "1000"
                        ) as (address, pid):
        soak = Soak(address, pid, metrics, plan)
        asyncio.run(soak.run())
    out(report(soak, time.monotonic() - began))
    failed = verdict(soak)
    out("soak: " + ("all checks passed" if not failed else "FAILED: " + failed[0]))
    return failed


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if min(args.rate, args.keys, args.partitions, args.consumers) < 1 or args.minutes <= 0 \
            or args.churn_s <= 0 or args.sample_s <= 0:
        print("soak: --minutes, --rate, --keys, --partitions, --consumers, --churn-s and "
              "--sample-s must be > 0", file=sys.stderr)
        return 2
    return 1 if run(args) else 0
