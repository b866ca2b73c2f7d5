"""Profiles for benchmark runs: pyinstrument in the client, py-spy on the broker.

Profile before guessing: the text summaries land in benchmarks/out/ and the
notes in RESULTS.md quote them.
"""

from __future__ import annotations

import collections
import contextlib
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def profiled(enabled: bool, broker_pid: int, stem: Path) -> Iterator[None]:
    if not enabled:
        yield
        return
    from pyinstrument import Profiler

    spy = _start_py_spy(broker_pid, stem.with_name(stem.name + "-broker.raw"))
    profiler = Profiler(interval=0.0005)
    profiler.start()
    try:
        yield
    finally:
        profiler.stop()
        stem.with_name(stem.name + "-client.txt").write_text(
            profiler.output_text(unicode=False, color=False, show_all=False))
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
            spy.wait(30)
            raw = stem.with_name(stem.name + "-broker.raw")
            if raw.exists():
                stem.with_name(stem.name + "-broker.txt").write_text(summarize_py_spy(raw))


@contextlib.contextmanager
def broker_profiled(enabled: bool, broker_pid: int, stem: Path) -> Iterator[None]:
    """py-spy on the broker only: STEM-broker.raw, and its summary STEM-broker.txt."""
    spy = _start_py_spy(broker_pid, stem.with_name(stem.name + "-broker.raw")) if enabled else None
    try:
        yield
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait(5)
            raw = stem.with_name(stem.name + "-broker.raw")
            if raw.exists():
                stem.with_name(stem.name + "-broker.txt").write_text(summarize_py_spy(raw))


def _start_py_spy(pid: int, out: Path) -> subprocess.Popen[bytes] | None:
    beside = Path(sys.executable).parent / "py-spy"
    exe = str(beside) if beside.exists() else shutil.which("py-spy")
    if exe is None:
        return None
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--format", "raw", "--rate", "500",
                             "--output", str(out), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def summarize_py_spy(raw: Path, top: int = 25) -> str:
    """Self time per function from py-spy's collapsed stacks ("a;b;c count")."""
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        own[stack.split(";")[-1]] += int(count)
    lines = [f"broker self time by function ({total} samples)"]
    lines += [f"{100 * n / max(total, 1):5.1f}%  {name}" for name, n in own.most_common(top)]
    return "\n".join(lines) + "\n"
