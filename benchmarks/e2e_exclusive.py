"""End to end Exclusive for the comparison: one consumer, the whole partition.

An Exclusive subscription admits one consumer (the broker refuses a second),
so this client always runs one consumer process (`CONSUMERS`), whatever
`--consumers` says; same workload and measurement as the other Keybus rows
(see benchmarks/keybus_subscribe.py).
"""

from __future__ import annotations

from typing import Any

from benchmarks import keybus_subscribe
from benchmarks.link import Link, Task
from benchmarks.measurement import CompareWorkload

TYPE = "exclusive"
CONSUMERS = 1


def prepare(address: str, topic: str, workload: CompareWorkload) -> None:
    keybus_subscribe.prepare(address, topic, TYPE, workload)


def consume(task: Task, link: Link) -> dict[str, Any]:
    return keybus_subscribe.consume(task, link, TYPE)
