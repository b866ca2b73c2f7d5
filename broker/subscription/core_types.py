"""The values a dispatch core takes and gives: kinds, limits, reads, sends, notices.

Shared by `core.py` (the state machine), its read side (`core_reads.py`), the
shell (`dispatcher.py`, `log_reader.py`) and the simulation. Plain frozen
values; nothing here decides anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from broker.subscription.holdings import I32, I64, Taken
from broker.subscription.selector_auto_split import AutoSplitSelector
from broker.subscription.selector_consistent import ConsistentHashSelector
from broker.subscription.selector_sticky import StickySelector
from sdk.core.model import HashRange

if TYPE_CHECKING:
    from broker.config import Settings
    from broker.subscription.spec import SubscriptionSpec


class Kind(IntEnum):
    """Subscription types (the wire's SubscriptionType values)."""

    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


class Mode(IntEnum):
    """Key_Shared modes (the wire's KeySharedMode values)."""

    AUTO_SPLIT = 0
    STICKY = 1
    CONSISTENT = 2


@dataclass(frozen=True, slots=True)
class CoreLimits:
    """The bounds of one core; see docs/architecture.md for what each costs."""

    look_ahead_events_max: int = 20_000  # events read and waiting in memory, in all
    waiting_slot_events_max: int = 64  # of them, per slot
    read_events_max: int = 5_000  # events per read
    consumer_unacked_events_max: int = 200_000  # per consumer: past it, nothing more
    consumer_permits_max: int = 100_000  # outstanding per consumer
    max_redeliveries: int = 0  # given back more often: dead-letter topic (0 = never)
    points_per_consumer: int = 100  # consistent hashing
    persisted_ranges_max: int = 100_000  # unacknowledged runs in a persisted cursor

    @classmethod
    def of(cls, settings: Settings, spec: SubscriptionSpec) -> CoreLimits:
        """A subscription partition's bounds: the broker's settings, and the
        subscription's own max_redeliveries."""
        return cls(look_ahead_events_max=settings.look_ahead_events_max,
                   waiting_slot_events_max=settings.waiting_slot_events_max,
                   read_events_max=settings.dispatch_read_events_max,
                   consumer_unacked_events_max=settings.consumer_unacked_events_max,
                   consumer_permits_max=settings.consumer_permits_max,
                   max_redeliveries=spec.max_redeliveries,
                   points_per_consumer=settings.key_shared_points_per_consumer,
                   persisted_ranges_max=settings.cursor_ranges_persisted_max)


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """Read the log from `start` (up to `stop`, about `events_max` events) and hand every
    event that passes the subscription's filter to `process_read`. A catch-up read
    (`slot_mask` set) may stop once it saw `selected_max` events of those slots."""

    ticket: int
    start: int
    stop: int
    events_max: int
    catch_up: bool = False
    slot_mask: npt.NDArray[np.bool_] | None = None
    selected_max: int = 0


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What a read found: every passing event in [request.start, stop), ascending."""

    stop: int
    offsets: I64
    slots: I32


@dataclass(frozen=True, slots=True)
class Send:
    """Send these events (ascending offsets, with redelivery counts) to `consumer`; the
    consumer acknowledges a record part of it whole by `send` (Ack.sent_ranges)."""

    consumer: str
    events: Taken
    send: int


@dataclass(frozen=True, slots=True)
class Notice:
    """Tell `consumer` its new Key_Shared ranges, or whether Failover made it active."""

    consumer: str
    ranges: tuple[HashRange, ...] | None = None
    active: bool | None = None


class PermitsInvalid(ValueError):
    """A permit grant out of range; the message says what is allowed."""


def new_selector(mode: int, points: int) -> AutoSplitSelector | StickySelector | ConsistentHashSelector:
    if mode == Mode.STICKY:
        return StickySelector()
    if mode == Mode.CONSISTENT:
        return ConsistentHashSelector(points)
    return AutoSplitSelector()
