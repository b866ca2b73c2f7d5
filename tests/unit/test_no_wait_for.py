"""The broker, SDK, CLI and Spark connector never use `asyncio.wait_for`; they
bound waits with `asyncio.timeout`.

Why: on Python 3.11 `wait_for` runs the awaitable in a task of its own and, when
a cancel reaches it after that task finished but before `wait_for` resumed,
returns the result and drops the cancel (CPython gh-86296; 3.12 rewrote it on
`asyncio.timeout`). A broker task stopped by cancel() that waits in a loop then
goes on forever, and its stop, which awaits it, never returns: a topic's view
maintainer did that, and DeleteTopic hung (tests/unit/test_view_stop_race.py).
`asyncio.timeout` awaits in the caller's task, so a cancel always reaches it.
The SDK's waits (a processor's balancing loop, a consumer's close) are stopped
by cancel() in the same way, so they follow the same rule.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "sdk", "keybus", "spark_connector")
WAIT_FOR = re.compile(r"\basyncio\.wait_for\(|from asyncio import[^\n]*\bwait_for\b")


def test_no_module_uses_asyncio_wait_for() -> None:
    found = [f"{path.relative_to(REPO)}:{n}"
             for package in PACKAGES
             for path in sorted((REPO / package).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if WAIT_FOR.search(line)]
    assert found == [], f"asyncio.wait_for (use asyncio.timeout): {found}"
