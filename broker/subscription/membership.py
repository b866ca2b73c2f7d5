"""Key_Shared membership of one partition: the mode's selector, fed by the shell.

Job: build the selector of the subscription's mode, hand it measured
dispatch rates (auto-split splits the busiest and gives a leaver's range to
the calmer neighbour), and turn its refusals into catalogue errors: an
overlapping sticky range names the consumer it collides with.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.errors import BrokerError
from broker.subscription.consumer_state import PartitionConsumer, Session
from broker.subscription.selector import RangeChanges, SelectorError
from broker.subscription.selector_auto_split import AutoSplitSelector
from broker.subscription.selector_consistent import ConsistentHashSelector
from broker.subscription.selector_sticky import RangeConflict, StickySelector
from broker.subscription.spec import SubscriptionSpec
from sdk.core.pb import keybus_pb2 as pb


class KeySharedMembership:
    """The selector of one Key_Shared subscription partition (runs on the event loop)."""

    def __init__(self, mode: int, points_per_consumer: int) -> None:
        self.mode = mode
        self.selector: AutoSplitSelector | StickySelector | ConsistentHashSelector
        if mode == pb.STICKY:
            self.selector = StickySelector()
        elif mode == pb.CONSISTENT:
            self.selector = ConsistentHashSelector(points_per_consumer)
        else:
            self.selector = AutoSplitSelector()

    def update_rates(self, consumers: Mapping[str, PartitionConsumer], now_ms: int) -> None:
        """Auto-split only: record each consumer's recent dispatch rate."""
        if isinstance(self.selector, AutoSplitSelector):
            for name, consumer in consumers.items():
                self.selector.set_dispatch_rate(name, consumer.meter.rate(now_ms))

    def add(self, session: Session, now_ms: int, spec: SubscriptionSpec) -> RangeChanges:
        """Attach a consumer to the selector.

        Raises:
            BrokerError: sticky_range_conflict (naming the other consumer) or
                key_shared_refused (no ranges in sticky mode, ranges in another
                mode, no room left to split).
        """
        try:
            return self.selector.add_consumer(session.name, now_ms, session.spec.sticky_ranges)
        except RangeConflict as e:
            raise BrokerError("sticky_range_conflict",
                              detail=f"subscription {spec.name!r} on topic {spec.topic!r}: {e}"
                              ) from None
        except SelectorError as e:
            raise BrokerError("key_shared_refused",
                              detail=f"subscription {spec.name!r} on topic {spec.topic!r}: {e}"
                              ) from None
