"""End to end Shared (no key order) for the comparison: the cost-of-order baseline.

Same workload, consumers and measurement as the Key_Shared row (see
benchmarks/keybus_subscribe.py); a Shared subscription spreads events by
permits alone, so Key_Shared minus Shared is what keeping per-key order costs.
"""

from __future__ import annotations

from typing import Any

from benchmarks import keybus_subscribe
from benchmarks.link import Link, Task
from benchmarks.measurement import CompareWorkload

TYPE = "shared"


def prepare(address: str, topic: str, workload: CompareWorkload) -> None:
    keybus_subscribe.prepare(address, topic, TYPE, workload)


def consume(task: Task, link: Link) -> dict[str, Any]:
    return keybus_subscribe.consume(task, link, TYPE)
