"""The loop side of the consumer's client-timed ack timeout (the rules are in
sdk/ack_timeouts.py): the clock and one loop timer, armed at the oldest held
event's deadline while something is held (deadlines only grow, so no other
timer is needed; no task of its own, as the waits of consumer_wakeups.py).

Runs on the consumer's event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from sdk.ack_timeouts import AckTimeouts

# nack(partition, offsets, delay_ms, slots): the consumer's nack_offsets
Nack = Callable[[int, list[int], int, list[int]], None]

# The delay of a timed-out event's nack: at once (0 would be the broker's
# nack_delay_ms_default, 1 s unless configured; the broker's own timeout gave back at once).
REDELIVER_DELAY_MS = 1


class AckTimer:
    """Times the events the application takes; nacks those not acknowledged in time."""

    def __init__(self, timeout_ms: int, nack: Nack) -> None:
        self.timeouts = AckTimeouts(timeout_ms)
        self._nack = nack
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def taken(self, partition: int, offsets: Sequence[int], slots: Sequence[int]) -> None:
        """The application took these events: their ack timeout runs from now."""
        self.timeouts.taken(partition, offsets, slots, _now_ms())
        if self._timer is None:
            self._arm()

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        due_ms = self.timeouts.next_deadline_ms()
        if due_ms is None or self._closed:
            self._timer = None
            return
        delay_s = max(due_ms - _now_ms(), 1) / 1000
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._fired)

    def _fired(self) -> None:
        """Nack what outlived the timeout with its slots (Key_Shared: the rest of each
        slot goes back behind it); the broker counts it toward max_redeliveries."""
        for partition, offsets, slots in self.timeouts.expired(_now_ms()):
            self._nack(partition, offsets, REDELIVER_DELAY_MS, slots)
        self._arm()


def _now_ms() -> int:
    return int(time.monotonic() * 1000)
