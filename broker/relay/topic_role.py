"""This broker's role for one replicated topic, and the state that goes with it.

Held by `RelayNode` (node.py) per topic; read by the relay's RPCs
(describe.py) and its metrics. Plain data: the node makes every change, one
transition per topic at a time under `lock`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from broker.relay.acks import AckTracker
from broker.relay.follower import TopicFollower
from broker.relay.settings import TopicReplication


@dataclass
class TopicRole:
    """This broker's role for one replicated topic and what goes with it."""

    topic: str
    replication: TopicReplication
    role: str = "candidate"  # leader, follower, candidate
    leader: str = ""  # the leader's address ("" = not known)
    epoch: int = 0
    confirmed: bool = False  # a leader whose ZooKeeper session is connected (or static)
    stopping: bool = False  # a leader handing over before it stops
    detail: str = "joining"
    follower: TopicFollower | None = None
    trackers: dict[int, AckTracker[asyncio.Future[None]]] = field(default_factory=dict)
    # (follower broker id, partition) -> (address, end offset, wall ms of the report)
    reports: dict[tuple[str, int], tuple[str, int, int]] = field(default_factory=dict)
    leader_changes: int = 0
    led_since: float = 0.0  # time.monotonic() when this leadership (epoch) began
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
