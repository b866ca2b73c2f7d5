"""The consumer calls of a dispatcher: attach, detach, permits, acks, nacks.

Job: take what one subscription's consumers say about one partition to its
core (`core.py`) and wake the dispatcher's round when that may give it work.
The subscription manager calls these on the event loop; they never await, so
they are atomic with respect to a round and need no lock. Kept apart from
`dispatcher.py`, whose job is the round (read, send, persist), so each file
keeps one job; these run per consumer message, never inside a commit's round.

It is a base class of `PartitionDispatcher`, which provides the state it
declares.
"""

from __future__ import annotations

import asyncio
import functools

import numpy as np

from broker.errors import BrokerError
from broker.partition import Partition
from broker.subscription.consumer_state import Session
from broker.subscription.core import PartitionCore, PermitsInvalid
from broker.subscription.dispatcher_supervision import DispatcherSupervision
from broker.subscription.selector import SelectorError
from broker.subscription.spec import SubscriptionSpec


class DispatcherConsumers:
    """See the module docstring; `PartitionDispatcher` provides the state it declares."""

    spec: SubscriptionSpec
    partition: Partition
    index: int
    core: PartitionCore
    sessions: dict[str, Session]
    supervision: DispatcherSupervision
    _wake: asyncio.Event
    _idle_clean: bool

    def check_attach(self, session: Session, now: int) -> None:
        """Raise what `attach` would raise, changing nothing."""
        self.supervision.check()
        if session.name in self.sessions:
            raise BrokerError("consumer_name_taken", consumer=session.name,
                              subscription=self.spec.name, topic=self.spec.topic)
        try:
            self.core.check_attach(session.member_spec(), now)
        except SelectorError as e:
            raise self.spec.refusal(e) from None

    def attach(self, session: Session, now: int) -> None:
        """Add a consumer (runs on the event loop, never awaits).

        Raises:
            BrokerError: the name is taken, or Key_Shared refuses it.
        """
        self.check_attach(session, now)
        try:
            self.core.process_attach(session.member_spec(), now)
        except SelectorError as e:
            raise self.spec.refusal(e) from None
        self.sessions[session.name] = session
        session.on_pause(self.index, functools.partial(self._pause, session.name))
        self._wake.set()

    def _pause(self, name: str, paused: bool) -> None:
        self.core.process_pause(name, paused)
        if not paused:
            self._wake.set()

    def detach(self, name: str, now: int) -> int:
        """Remove a consumer; its unacknowledged events (the count returned) are redelivered."""
        if self.sessions.pop(name, None) is None:
            return 0
        self._wake.set()  # the task runs once this returns
        return self.core.process_detach(name, now)

    # ------------------------------------------------------------ flow control and acks

    def grant(self, name: str, count: int) -> None:
        """Add permits (runs on the event loop).

        Raises:
            BrokerError: count 0, or more outstanding permits than allowed.
        """
        try:
            self.core.process_permits(name, count)
        except PermitsInvalid as e:
            raise BrokerError("permits_invalid", partition=self.index, detail=str(e)) from None
        self._wake.set()

    def ack(self, name: str, starts: np.ndarray, stops: np.ndarray) -> None:
        """Acknowledge what `name` holds in these ranges (sorted, disjoint, checked)."""
        if self.core.process_ack(name, starts, stops) and self._ack_wakes():
            self._wake.set()

    def ack_sent(self, name: str, sends: np.ndarray, starts: np.ndarray,
                 stops: np.ndarray) -> None:
        """Acknowledge whole record parts: what `name` holds of each send in its range."""
        if self.core.process_ack_sent(name, sends, starts, stops) and self._ack_wakes():
            self._wake.set()

    def _ack_wakes(self) -> bool:
        """Whether an ack may give the round something to do: events wait (in memory,
        on floors, given back, unread in the log: a slot drained, a consumer was at its
        unacked limit) or the round idles with no timer to persist the cursor the ack
        makes dirty. Otherwise a round per ack message (following the tail: most of them)
        would find nothing; the log growing wakes it (`_on_durable`)."""
        core = self.core
        return bool(self._idle_clean or core.position < self.partition.end_offset
                    or len(core.pending) or core.slots.floors or core.slots.draining
                    or len(core.given_back))

    def ack_cumulative(self, name: str, stop: int) -> None:
        self.core.process_ack_cumulative(name, stop)
        self._wake.set()

    def nack(self, name: str, starts: np.ndarray, stops: np.ndarray, delay_ms: int,
             now: int, rest_of_slots: dict[int, int]) -> None:
        """Give events back for redelivery after `delay_ms` (see `Nack.rest_of_slots`)."""
        self.core.process_nack(name, starts, stops, now + delay_ms, now, rest_of_slots)
        self._wake.set()
