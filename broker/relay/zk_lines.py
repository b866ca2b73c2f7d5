"""Once per outage: kazoo's lines about each connection attempt while ZooKeeper is away.

kazoo reconnects for ever (zk.py: attempts at most a second apart) and logs
every attempt: `Connecting to ...` (INFO), then `Connection dropped: socket
connection error: Connection refused` or `Connection time-out: ...`
(WARNING). A ZooKeeper away for ten minutes so wrote about 1,200 lines per
broker, burying the lines that say what happened (`session SUSPENDED`,
`leadership unconfirmed`). Here each kind of those lines is said once per
outage at kazoo's level, with its own message (why the first attempt
failed); repeats go to DEBUG and are counted, and the session's CONNECTED
line says how long it was away and how many attempts failed
(`ZkSession._changed`).

`ReconnectLines` is the pure core (time is an argument); `KazooLog` is the
logger handed to kazoo (`KazooClient(logger=...)`), one per session, so two
sessions in one process keep separate counts.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

# kazoo's format strings (kazoo/protocol/connection.py) of one connection attempt.
ATTEMPT = "Connecting to %s(%s):%s, use_ssl: %r"
FAILURES = frozenset({"Connection dropped: %s", "Connection time-out: %s",
                      "Cannot resolve %s: %s"})
REPEATED = FAILURES | {ATTEMPT}


@dataclass(frozen=True, slots=True)
class Outage:
    """An outage that ended: seconds from its first failed attempt, attempts failed."""

    seconds: float
    failed: int


class ReconnectLines:
    """Which level each kazoo line gets: the first of a kind per outage its own,
    a repeat DEBUG. An outage ends when the session is CONNECTED (`connected`)."""

    def __init__(self) -> None:
        self._said: set[str] = set()
        self._failed = 0
        self._since_s: float | None = None

    def level(self, message: str, level: int, now_s: float) -> int:
        """The level to log kazoo's line `message` (its format string) at."""
        if message not in REPEATED:
            return level
        if message in FAILURES:
            self._failed += 1
            if self._since_s is None:
                self._since_s = now_s
        if message in self._said:
            return min(level, logging.DEBUG)
        self._said.add(message)
        return level

    def connected(self, now_s: float) -> Outage | None:
        """The session is connected: the outage that ended (None when no attempt
        failed since the last connection); the next failure starts a new one."""
        outage = None
        if self._since_s is not None:
            outage = Outage(now_s - self._since_s, self._failed)
        self._said.clear()
        self._failed = 0
        self._since_s = None
        return outage


class KazooLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """kazoo's logger ("kazoo.client", as kazoo's own) with the repeats of a
    connection attempt's lines at DEBUG. kazoo logs from its connection thread
    and from callers' threads: a lock keeps the counts whole."""

    def __init__(self) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self._lines = ReconnectLines()
        self._lock = threading.Lock()

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            level = self._lines.level(msg, level, time.monotonic())
        super().log(level, msg, *args, **kwargs)

    def connected(self) -> Outage | None:
        """See `ReconnectLines.connected` (now)."""
        with self._lock:
            return self._lines.connected(time.monotonic())
