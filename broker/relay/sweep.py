"""The relay's look at its own state once a second: gauges, and who follows.

Why a timer: the gauges are values at a moment (copy lag, upstream silence,
followers following), and a follower's grace ends with no event of its own
(no report, no closed stream), so the leader's "stopped following" line
(following_log.py) is written here, at most `SWEEP_INTERVAL_S` late.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from broker.errors import BrokerError
from broker.relay.copy_state import CopyState, wall_ms
from broker.relay.following_log import log_changes
from broker.relay.metrics import export_acks, export_copy, forget_copy

if TYPE_CHECKING:
    from broker.relay.node import RelayNode

SWEEP_INTERVAL_S = 1.0


def sweep(node: RelayNode) -> None:
    """Every topic's gauges; on a leader, each change of who follows, logged."""
    now = wall_ms()
    now_monotonic_ms = time.monotonic() * 1000  # the trackers' clock
    for topic, role in list(node.roles.items()):
        leading = role.role == "leader"
        export_acks(topic, role.trackers, leading, now_monotonic_ms)
        if leading:
            for index, tracker in role.trackers.items():
                log_changes(role, index, tracker, now_monotonic_ms)
        follower = role.follower
        if follower is None:  # copies nothing now: its last copy's series go
            with contextlib.suppress(BrokerError):
                for partition in node.registry.partitions(topic):
                    forget_copy(topic, partition.index)
            continue
        for index, state in follower.states.items():
            with contextlib.suppress(BrokerError):
                end = node.registry.partition(topic, index).log_end
                export_copy(topic, index, state, end, now, node.relay.upstream_silence_ms)
        if follower.unreachable_since_ms and not follower.states:  # its setup fails
            with contextlib.suppress(BrokerError):
                for partition in node.registry.partitions(topic):
                    export_copy(topic, partition.index, CopyState(
                        unreachable_since_ms=follower.unreachable_since_ms), partition.log_end,
                        now)
