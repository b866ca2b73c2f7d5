"""End to end Failover for the comparison: N consumers, one active per partition.

All `--consumers` processes subscribe; the broker makes one of them active on
the comparison's single partition (priority, then name: c0) and the others
wait as standbys, given nothing. Throughput is one consumer's; the standbys
cost their idle polling. A standby's fetch comes back empty every
`keybus_subscribe.RECEIVE_WAIT_S`, so it ends cleanly once every event is
delivered and acknowledged. Same workload and measurement as the other Keybus
rows (see benchmarks/keybus_subscribe.py).
"""

from __future__ import annotations

from typing import Any

from benchmarks import keybus_subscribe
from benchmarks.link import Link, Task
from benchmarks.measurement import CompareWorkload

TYPE = "failover"


def prepare(address: str, topic: str, workload: CompareWorkload) -> None:
    keybus_subscribe.prepare(address, topic, TYPE, workload)


def consume(task: Task, link: Link) -> dict[str, Any]:
    return keybus_subscribe.consume(task, link, TYPE)
