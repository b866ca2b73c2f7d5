"""The consumer's ack timeout, timed on the client (Pulsar's UnAckedMessageTracker).

The clock of an event starts when the application takes it (`receive` hands it
out, or `receive_batch` its batch), not when the broker sends it: an event waiting
in the receive buffer behind a slow application does not time out (timed by the
broker, 41 of 60 events of a Shared consumer acking every one in 100 ms went to
the dead-letter topic with ack_timeout_ms=1000, max_redeliveries=1). What outlives
`timeout_ms` unacknowledged the consumer nacks (`expired`), so the broker counts a
redelivery toward max_redeliveries as before; an ack, a nack, a seek's drop or a
reconnect (the broker gives back everything anyway) forgets events.

Pure: no asyncio, grpc or clock (`now_ms` is an argument). Takes come in time
order and the timeout is one value, so deadlines only grow: the oldest take is
always the next to expire.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence


class _Take:
    """Events taken in one step, with their deadline; `live` of them not forgotten."""

    __slots__ = ("deadline_ms", "live", "partition")

    def __init__(self, deadline_ms: int, partition: int, live: int) -> None:
        self.deadline_ms = deadline_ms
        self.partition = partition
        self.live = live


class AckTimeouts:
    """Events the application took and has not acknowledged, nacked or lost."""

    def __init__(self, timeout_ms: int) -> None:
        if timeout_ms <= 0:
            raise ValueError(f"timeout_ms={timeout_ms} is invalid: need > 0 "
                             "(0 = no ack timeout: make no AckTimeouts)")
        self.timeout_ms = timeout_ms
        # partition -> offset -> (its take, its slot)
        self._held: dict[int, dict[int, tuple[_Take, int]]] = {}
        self._takes: deque[_Take] = deque()  # in take order, so in deadline order

    def __len__(self) -> int:
        """Events held now."""
        return sum(len(held) for held in self._held.values())

    def taken(self, partition: int, offsets: Sequence[int], slots: Sequence[int],
              now_ms: int) -> None:
        """The application took these events (`slots` parallel to `offsets`). One taken
        again (a redelivery) is timed from now."""
        take = _Take(now_ms + self.timeout_ms, partition, len(offsets))
        held = self._held.setdefault(partition, {})
        for offset, slot in zip(offsets, slots, strict=True):
            before = held.get(offset)
            if before is not None:
                before[0].live -= 1
            held[offset] = (take, slot)
        self._takes.append(take)

    def forget(self, partition: int, offsets: Iterable[int]) -> None:
        """Acknowledged or nacked: no longer timed."""
        held = self._held.get(partition)
        if not held:
            return
        for offset in offsets:
            entry = held.pop(offset, None)
            if entry is not None:
                entry[0].live -= 1

    def forget_below(self, partition: int, stop: int) -> None:
        """A cumulative ack: every event of `partition` below `stop`."""
        held = self._held.get(partition)
        if held:
            self.forget(partition, [offset for offset in held if offset < stop])

    def forget_after(self, partition: int, first: dict[int, int]) -> None:
        """A Key_Shared nack (`first`: slot -> its lowest nacked offset): the broker takes
        back what follows it of each slot, taken or not, and sends it again after it."""
        held = self._held.get(partition)
        if held:
            self.forget(partition, [offset for offset, (_, slot) in held.items()
                                    if offset > first.get(slot, offset)])

    def forget_partition(self, partition: int) -> None:
        """A seek: what was taken of `partition` is from before it."""
        held = self._held.get(partition)
        if held:
            self.forget(partition, list(held))

    def clear(self) -> None:
        """A reconnect: the broker gives back everything unacknowledged."""
        self._held.clear()
        self._takes.clear()

    def next_deadline_ms(self) -> int | None:
        """When the oldest event still held times out; None: nothing is held."""
        takes = self._takes
        while takes and takes[0].live <= 0:
            takes.popleft()
        return takes[0].deadline_ms if takes else None

    def expired(self, now_ms: int) -> list[tuple[int, list[int], list[int]]]:
        """Take out what timed out by `now_ms`: (partition, offsets, slots) per
        partition, offsets ascending (to be nacked)."""
        takes = self._takes
        due: set[int] = set()
        while takes and takes[0].deadline_ms <= now_ms:
            take = takes.popleft()
            if take.live > 0:
                due.add(id(take))
        if not due:
            return []
        out = []
        for partition, held in self._held.items():
            gone = sorted(offset for offset, (take, _) in held.items() if id(take) in due)
            if gone:
                out.append((partition, gone, [held.pop(offset)[1] for offset in gone]))
        return out
