"""Dead-letter cycles already stored: reported once each, nothing changed.

A new subscription that would close a dead-letter cycle is refused
(`manager.py`, `dead_letter_cycle.py`), but a cycle can still be stored: a
data directory from before that check, or a relay follower that copies its
upstream's subscriptions unchecked (a refusal would stop its sync round),
after a consumer here made one half of the cycle. Such a cycle is left as it
is: deleting a subscription would lose its cursor, and which one to give up
is the operator's call. It is named in one WARNING line (topics,
subscriptions, what to do) when first seen, and counted in the gauge
`keybus_dead_letter_cycles` while it lasts.

`CycleWatch` is pure (which cycles are new, which are gone); `report_cycles`
is the shell that logs and sets the gauge.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field

from broker.errors import quote
from broker.metrics import DEAD_LETTER_CYCLES
from broker.subscription.dead_letter_cycle import Hop, cycle_text, find_cycles

log = logging.getLogger("keybus.subscriptions")


@dataclass(slots=True)
class CycleWatch:
    """The cycles reported so far, each as the set of its hops, while they last."""

    known: set[frozenset[Hop]] = field(default_factory=set)

    def process_hops(self, hops: Collection[Hop]) -> tuple[list[list[Hop]], list[frozenset[Hop]]]:
        """The cycles among `hops` not reported before, and the reported ones
        gone (one of their subscriptions deleted). A reported cycle whose hops
        all remain is still known, even when `find_cycles` names another one
        through them now: it is never reported twice while it lasts."""
        present = set(hops)
        gone = [cycle for cycle in self.known if not cycle <= present]
        self.known.difference_update(gone)
        new = []
        for cycle in find_cycles(present):
            key = frozenset(cycle)
            if key not in self.known:
                self.known.add(key)
                new.append(cycle)
        return new, gone


def report_cycles(watch: CycleWatch, hops: Collection[Hop], where: str) -> None:
    """Log the new and the gone cycles among `hops` (`where`: what just happened,
    for the log line) and set the gauge."""
    new, gone = watch.process_hops(hops)
    for cycle in new:
        log.warning(
            "dead-letter cycle among stored subscriptions (%s): %s; an event dead-lettered "
            "along it comes back to where it started and is delivered again, every lap a new "
            "event in each of its topics, without end. Nothing was changed: delete one of its "
            "subscriptions (keybus subscriptions delete TOPIC SUBSCRIPTION), or recreate it "
            "with a dead_letter_topic that no dead-letter chain leads back from",
            where, cycle_text(cycle))
    for key in gone:
        cycle = sorted(key, key=lambda h: (h.topic, h.subscription))
        log.info("dead-letter cycle gone (a subscription of it was deleted): %s",
                 ", ".join(f"{quote(h.subscription)} on {quote(h.topic)}" for h in cycle))
    DEAD_LETTER_CYCLES.set(len(watch.known))
