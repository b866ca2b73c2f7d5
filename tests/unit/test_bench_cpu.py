"""CPU accounting from /proc/PID/stat.

Goal: utime + stime are read from the right fields even when the command name
holds spaces or parentheses (field 2 is free text).
Method: hand-written stat lines; one read of this process's own stat.
"""

from __future__ import annotations

import time

from benchmarks.cpu import cpu_ticks_of_stat, process_cpu_s


def _stat(comm: str, utime: int, stime: int) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    return f"4242 ({comm}) S 1 4242 4242 0 -1 4194560 100 0 0 0 {utime} {stime} 7 8 20 0 1 0"


def test_utime_plus_stime() -> None:
    assert cpu_ticks_of_stat(_stat("redis-server", 120, 30)) == 150


def test_a_command_name_with_spaces_and_parentheses() -> None:
    assert cpu_ticks_of_stat(_stat("weird ) name (x)", 5, 6)) == 11


def test_this_process_has_used_some_cpu() -> None:
    before = process_cpu_s()
    sum(i * i for i in range(200_000))
    assert process_cpu_s() >= before >= 0.0


def test_a_few_ms_of_this_process_are_counted() -> None:
    """A client that works a millisecond or two (a tiny scenario) has used CPU: /proc's
    clock ticks (10 ms) would read 0 for most such spans."""
    for _ in range(5):
        before, began = process_cpu_s(), time.process_time()
        while time.process_time() - began < 0.001:
            pass
        assert process_cpu_s() - before > 0
