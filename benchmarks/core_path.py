"""`python -m benchmarks core-path`: a dispatcher's own work per commit, in one process.

Why: the broker's event-loop CPU per commit (`python -m benchmarks stages`) moves
by a fifth from run to run on this shared machine, so a change of a few percent
to the dispatch path does not show there. This runs the real core, read and
delivery code of one Key_Shared subscription (`--consumers` consumers) as a
dispatcher following the tail runs it for each commit, with no event loop, no
gRPC and no other process, and reports:
- CPU-µs per commit: the best of `--repeats` runs (noise only adds);
- Python calls per commit, counted by cProfile: the same on every run of the
  same code, so a change in them is never noise;
- where the calls' own time goes (cProfile), the largest first.

Per commit: one stored record of `--events` events with random integer keys
and 100-byte values (as the latency benchmark's), appended to the partition's
recent records, then the round of broker/subscription/dispatcher.py: tick,
dispatch, next read, the read over the recent records, the records cached,
`process_read`, the sends cut into Delivery messages (`delivery_messages`),
notices taken, the cache trimmed. Every `--ack-every` commits each consumer
acknowledges its sends whole (`process_ack_sent`, as the SDK acks record
parts) and the cursor is trimmed below the mark-delete. It checks as it goes
that every event reaches exactly one consumer, in offset order per consumer.

`--base REV` runs the same measurement over REV's broker code (a temporary git
worktree on PYTHONPATH) and this code alternately, `--pairs` times each, and
prints both with the change.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import struct
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# The broker's modules come from whichever tree is first on the path (`--base`: REV's);
# nothing of `benchmarks` is imported here at the top, since REV's may lack this file's peers.
from broker.log.recent import RecentRecords
from broker.log.rocks_store import Append
from broker.subscription.core import CoreLimits, Kind, PartitionCore
from broker.subscription.core_types import Mode
from broker.subscription.cursor import Cursor
from broker.subscription.delivery import RecordCache, delivery_messages
from broker.subscription.log_reader import read_events_in
from broker.subscription.members import MemberSpec
from sdk.core.hashing import slots_of

try:  # a REV before Delivery.open_windows has no share_ends (`--base`)
    from broker.subscription.share_ends import open_windows
except ImportError:
    open_windows = None  # type: ignore[assignment]
from sdk.core.pb import keybus_pb2 as pb

RUN_TIMEOUT_S = 600
VALUE_BYTES = 100
TOP_FUNCTIONS = 12


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks core-path",
                                     description=__doc__.split("\n\n")[1])
    parser.add_argument("--events", type=int, default=12,
                        help="events per commit (12: the stages run at 10,000 events/s)")
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--commits", type=int, default=2_000, help="commits per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs; the best counts")
    parser.add_argument("--ack-every", type=int, default=20,
                        help="commits between each consumer's acks (20: acks gathered "
                             "for 20 ms at about 1,000 commits/s)")
    parser.add_argument("--base", help="a git revision to compare against")
    parser.add_argument("--pairs", type=int, default=3, help="with --base: runs of each side")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    options = parser.parse_args(argv)
    for name in ("events", "consumers", "commits", "repeats", "ack_every", "pairs"):
        if getattr(options, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return options


class CorePath:
    """One subscription's core, cache and recent records, driven commit by commit."""

    def __init__(self, events: int, consumers: int, ack_every: int, seed: int = 1) -> None:
        self.events, self.ack_every = events, ack_every
        self.core = PartitionCore(Kind.KEY_SHARED, Mode.AUTO_SPLIT, 0, CoreLimits(),
                                  Cursor(0), 0)
        self.names = [f"consumer-{i}" for i in range(consumers)]
        for name in self.names:
            self.core.process_attach(MemberSpec(name), 0)
            self.core.process_permits(name, 100_000)
        self.core.take_notices()
        self.cache = RecordCache(64 << 20)
        self.recent = RecentRecords(64 << 20, 4096)
        self.rnd = random.Random(seed)
        self.end = 0  # the durable end
        self.sends: dict[str, list[Any]] = {name: [] for name in self.names}
        self.last_sent: dict[str, int] = dict.fromkeys(self.names, -1)
        self.delivered = 0
        self.commits = 0

    def stored(self, count: int) -> bytes:
        """A stored record value of `count` events from the end on."""
        keys = [self.rnd.randrange(100_000) for _ in range(count)]
        batch = pb.EventBatch(count=count, key_ints=keys, slots=slots_of(keys),
                              values=[struct.pack(">q", k) + b"x" * (VALUE_BYTES - 8)
                                      for k in keys])
        return Append.of_record(pb.Record(topic="core-path", partition=0, base_offset=self.end,
                                          scn_first=self.end + 1, publish_time_ms=1,
                                          batch=batch)).value

    def values(self, commits: int) -> list[bytes]:
        """The stored records of the next `commits` commits (made before timing)."""
        out = []
        end = self.end
        for _ in range(commits):
            out.append(self.stored(self.events))
            self.end += self.events
        self.end = end
        return out

    def commit(self, value: bytes) -> None:
        """One commit and the dispatcher round it wakes (see the module docstring)."""
        core, cache = self.core, self.cache
        base = self.end
        self.recent.add(base, self.events, value)
        self.end += self.events
        now = self.commits
        core.process_tick(now)
        core.dispatch(now)
        request = core.next_read(self.end)
        assert request is not None, "a commit left the core nothing to read"
        covering = self.recent.covering(request.start, request.stop)
        assert covering is not None
        records, result = read_events_in(covering, request, None, 4 << 20)
        for record in records:
            cache.add(record)
        core.process_read(request, result, now)
        sends = core.take_sends()
        extra: list[tuple[Any, ...]] = [()] * len(sends)
        if open_windows is not None:  # as the dispatcher: each send's record, its open windows
            held = [cache.holding_all(send.events.offsets) for send in sends]
            extra = list(zip(held, open_windows(core, cache, sends, held), strict=True))
        for send, more in zip(sends, extra, strict=True):
            offsets = send.events.offsets
            messages, gone = delivery_messages(cache, offsets, None, 0, 4 << 20, send.send,
                                               *more)
            assert messages and not len(gone)
            first, last = int(offsets[0]), int(offsets[-1])
            assert first > self.last_sent[send.consumer], "a consumer got an offset twice"
            self.last_sent[send.consumer] = last
            self.delivered += len(offsets)
            self.sends[send.consumer].append((send.send, first, last + 1))
        core.take_notices()
        cache.trim(-1)
        self.commits += 1
        if self.commits % self.ack_every == 0:
            self.acknowledge()

    def acknowledge(self) -> None:
        for name in self.names:
            sends, self.sends[name] = self.sends[name], []
            if sends:
                send_ids, starts, stops = (np.array(c, np.int64) for c in zip(*sends, strict=True))
                self.core.process_ack_sent(name, send_ids, starts, stops)
        self.cache.trim(self.core.mark_delete())

    def check(self) -> None:
        assert self.delivered == self.end, (self.delivered, self.end)


def measure(options: argparse.Namespace) -> dict[str, Any]:
    """CPU-µs per commit (best of the repeats), calls per commit and the top functions."""
    best = float("inf")
    for repeat in range(options.repeats):
        path, values = _warmed(options, seed=repeat)
        began = time.thread_time()
        for value in values:
            path.commit(value)
        best = min(best, (time.thread_time() - began) / options.commits * 1e6)
        path.check()
    path, values = _warmed(options, seed=1)
    profile = cProfile.Profile()
    profile.enable()
    for value in values:
        path.commit(value)
    profile.disable()
    path.check()
    stats = pstats.Stats(profile)
    entries: Any = stats.stats  # type: ignore[attr-defined]
    own = sorted(((tottime, calls, _where(key)) for key, (_, calls, tottime, _, _)
                  in entries.items()), reverse=True)
    total_own = sum(t for t, _, _ in own) or 1.0
    return {"events": options.events, "consumers": options.consumers,
            "us_per_commit": round(best, 2),
            "calls_per_commit": round(stats.total_calls / options.commits, 1),  # type: ignore[attr-defined]
            "top": [{"function": where, "calls_per_commit": round(calls / options.commits, 2),
                     "share_of_own_time": round(t / total_own, 3)}
                    for t, calls, where in own[:TOP_FUNCTIONS]]}


def _warmed(options: argparse.Namespace, seed: int) -> tuple[CorePath, list[bytes]]:
    """A path past 200 commits (holdings and cache past their first sizes) and the stored
    records of the next `--commits`, made before any timing."""
    path = CorePath(options.events, options.consumers, options.ack_every, seed)
    for value in path.values(200):
        path.commit(value)
    return path, path.values(options.commits)


def _where(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    parts = Path(filename).parts
    short = "/".join(parts[-2:]) if len(parts) > 1 else filename
    return f"{short}:{line}({name})"


def render(figures: dict[str, Any]) -> str:
    lines = [f"{figures['events']} events a commit to {figures['consumers']} consumers: "
             f"{figures['us_per_commit']} CPU-µs and {figures['calls_per_commit']} Python "
             "calls per commit", "", "| function | calls per commit | share of own time |",
             "|---|---|---|"]
    for row in figures["top"]:
        lines.append(f"| {row['function']} | {row['calls_per_commit']} | "
                     f"{row['share_of_own_time']} |")
    return "\n".join(lines)


def run_side(tree: Path, options: argparse.Namespace) -> dict[str, Any]:
    """This harness over the broker code of `tree`, in a process of its own."""
    from benchmarks.worktree import run_script_over  # this tree's, not REV's (see the top)

    arguments = ["--json", "--events", str(options.events),
                 "--consumers", str(options.consumers), "--commits", str(options.commits),
                 "--repeats", str(options.repeats), "--ack-every", str(options.ack_every)]
    result: dict[str, Any] = json.loads(
        run_script_over(tree, Path(__file__).resolve(), arguments, RUN_TIMEOUT_S))
    return result


def compare(options: argparse.Namespace) -> int:
    # here, not at the top: `run_side` runs this file over REV's tree, which may lack it
    from benchmarks.worktree import REPO, WorktreeError, checked_out

    runs: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
    try:
        with checked_out(options.base, "keybus-core-path-") as worktree:
            for _ in range(options.pairs):
                runs["base"].append(run_side(worktree, options))
                runs["head"].append(run_side(REPO, options))
    except WorktreeError as e:
        print(f"core-path: cannot check out {options.base!r}: {e}", file=sys.stderr)
        return 2
    print(render_comparison(options, runs))
    return 0


def render_comparison(options: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]
                      ) -> str:
    lines = [f"`python -m benchmarks core-path --base {options.base} --events "
             f"{options.events} --consumers {options.consumers}`", "",
             "| side | CPU-µs per commit, each run | best | Python calls per commit |",
             "|---|---|---|---|"]
    best = {}
    for side in ("base", "head"):
        figures = [run["us_per_commit"] for run in runs[side]]
        best[side] = min(figures)
        calls = sorted({run["calls_per_commit"] for run in runs[side]})
        lines.append(f"| {side} | {', '.join(map(str, figures))} | {best[side]} | "
                     f"{', '.join(map(str, calls))} |")
    change = 100 * (best["head"] - best["base"]) / best["base"]
    calls_change = 100 * (runs["head"][0]["calls_per_commit"] /
                          runs["base"][0]["calls_per_commit"] - 1)
    lines += ["", f"Best against best: {change:+.1f}% CPU-µs; calls {calls_change:+.1f}%."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    if options.base:
        return compare(options)
    figures = measure(options)
    print(json.dumps(figures) if options.json else render(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
