"""CPU seconds a process has used, from /proc/PID/stat (utime + stime, all threads).

Read before and after a scenario; the difference is what that scenario cost,
for client and server processes alike, without adding a dependency (psutil).
`main_thread_cpu_s` reads one thread's: a Python server's main thread is its
event loop, the one thread every step of an event's path queues on.
"""

from __future__ import annotations

import os
import time


def cpu_ticks_of_stat(stat: str) -> int:
    """utime + stime in clock ticks from the text of /proc/PID/stat.

    The command name (field 2) is in parentheses and may hold spaces, so fields
    are counted from the last ')': field 3 (state) is first there, so utime
    (field 14) and stime (field 15) are the 12th and 13th.
    """
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def _stat_cpu_s(path: str) -> float:
    with open(path) as f:
        return cpu_ticks_of_stat(f.read()) / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int | None = None) -> float:
    """CPU seconds of `pid` (this process when None).

    This process's own comes from `time.process_time()`: the same sum of every
    thread's user and system time, to the nanosecond, where /proc counts clock
    ticks (10 ms here), so a client that works a few ms would read 0."""
    if pid is None:
        return time.process_time()
    return _stat_cpu_s(f"/proc/{pid}/stat")


def main_thread_cpu_s(pid: int) -> float:
    """CPU seconds of `pid`'s main thread (its thread id is the process id)."""
    return _stat_cpu_s(f"/proc/{pid}/task/{pid}/stat")
