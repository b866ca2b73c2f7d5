"""The simulation's oracle: what the broker must have done, kept independently of the core.

Goal: know, from the protocol alone (what was produced, sent, acked, nacked,
given back, timed out), which consumer holds which event, which events are
acknowledged, which wait to be sent again and when; and check every delivery
against it: per-key order including redeliveries, at most one consumer
holding a slot's unacknowledged events, no acknowledged event sent again
(after a broker crash only what the persisted cursor still called
unacknowledged may come again), redelivery counts, and no filtered event
ever sent. Violations raise `Violation` with a message that says what
happened; the harness adds the seed.

Method: plain Python sets and dicts per offset (slow and obvious), the
opposite of the core's arrays, so the two cannot share a mistake.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


class Violation(AssertionError):
    """A property the broker must keep did not hold."""


@dataclass(slots=True)
class Event:
    key: int
    slot: int
    passes: bool  # the subscription's filter lets it through


@dataclass
class Model:
    """See the module docstring."""

    keyed: bool  # per-key order and slot ownership apply (not Shared)
    max_redeliveries: int
    events: list[Event] = field(default_factory=list)
    acked: bytearray = field(default_factory=bytearray)
    holder: dict[int, str] = field(default_factory=dict)  # offset -> consumer (broker's view)
    sent_ms: dict[int, int] = field(default_factory=dict)
    slot_holders: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    given_back: dict[int, int] = field(default_factory=dict)  # offset -> due ms
    dead: set[int] = field(default_factory=set)  # out to the dead-letter topic
    counts: dict[int, int] = field(default_factory=dict)  # offset -> redelivery count
    record_base: list[int] = field(default_factory=list)  # offset -> its record's first offset
    send_of: dict[int, int] = field(default_factory=dict)  # held offset -> the send it came in
    key_offsets: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    slot_offsets: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    first_open: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # per key
    slot_open: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # per slot
    # the applications' view: what they acknowledged (the broker may not know yet) and hold
    app_acked: bytearray = field(default_factory=bytearray)
    app_held: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    app_slot_holders: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    app_first_open: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    deliveries: int = 0
    redeliveries: int = 0

    @property
    def end(self) -> int:
        return len(self.events)

    # ------------------------------------------------------------ the log

    def produced(self, keys: list[int], slots: list[int], passes: list[bool]) -> None:
        base = len(self.events)
        for key, slot, ok in zip(keys, slots, passes, strict=True):
            offset = len(self.events)
            self.record_base.append(base)
            self.events.append(Event(key, slot, ok))
            self.acked.append(0 if ok else 1)  # filtered events count as acknowledged
            self.app_acked.append(0 if ok else 1)
            if ok:
                self.key_offsets[key].append(offset)
                self.slot_offsets[slot].append(offset)

    # ------------------------------------------------------------ deliveries

    def deliver(self, consumer: str, offset: int, count: int, now_ms: int, send: int = 0) -> None:
        """The broker sent `offset` to `consumer` with this redelivery count in `send`."""
        if offset >= self.end:
            raise Violation(f"offset {offset} sent but the log ends at {self.end}")
        event = self.events[offset]
        if not event.passes:
            raise Violation(f"offset {offset} sent though the filter drops it")
        if self.acked[offset]:
            raise Violation(f"offset {offset} sent to {consumer} though it is acknowledged")
        if offset in self.holder:
            raise Violation(f"offset {offset} sent to {consumer} while {self.holder[offset]} "
                            f"holds it")
        if offset in self.dead:
            raise Violation(f"offset {offset} sent to {consumer} while it goes to the "
                            f"dead-letter topic")
        expected = self.counts.get(offset, 0)
        if count != expected:
            raise Violation(f"offset {offset} sent with redelivery count {count}, expected "
                            f"{expected}")
        if self.keyed:
            self._check_order(consumer, offset, event)
        self.given_back.pop(offset, None)
        self.holder[offset] = consumer
        self.sent_ms[offset] = now_ms
        self.send_of[offset] = send
        holders = self.slot_holders[event.slot]
        holders[consumer] = holders.get(consumer, 0) + 1
        self.deliveries += 1
        self.redeliveries += count > 0

    def _check_order(self, consumer: str, offset: int, event: Event) -> None:
        others = [c for c in self.slot_holders[event.slot] if c != consumer]
        if others:
            raise Violation(f"slot {event.slot}: offset {offset} sent to {consumer} while "
                            f"{others} hold unacked events of it")
        offsets = self.key_offsets[event.key]
        i = self.first_open[event.key]
        while i < len(offsets) and self.acked[offsets[i]]:
            i += 1
        self.first_open[event.key] = i
        while i < len(offsets) and offsets[i] < offset:
            earlier = offsets[i]
            if not self.acked[earlier] and self.holder.get(earlier) != consumer:
                raise Violation(f"key {event.key}: offset {offset} sent to {consumer} before "
                                f"offset {earlier} was acknowledged (holder "
                                f"{self.holder.get(earlier)}, given back "
                                f"{earlier in self.given_back})")
            i += 1

    # ------------------------------------------------------------ the applications

    def app_take(self, consumer: str, offset: int, checked: bool = True) -> None:
        """An application takes `offset`: every earlier event of its key is acknowledged
        by an application or held by this one, and no other application holds its slot.

        Not `checked`: an application whose events the broker may take back behind its
        back (an ack timeout, a Failover switch) may see a key's event again after later
        ones, as in Pulsar; the broker's side is still checked at every delivery."""
        event = self.events[offset]
        if not checked:
            return
        if self.keyed:
            others = [c for c in self.app_slot_holders[event.slot] if c != consumer]
            if others:
                raise Violation(f"slot {event.slot}: the application of {consumer} got "
                                f"{offset} while those of {others} hold events of it")
            offsets = self.key_offsets[event.key]
            i = self.app_first_open[event.key]
            while i < len(offsets) and self.app_acked[offsets[i]]:
                i += 1
            self.app_first_open[event.key] = i
            mine = self.app_held[consumer]
            while i < len(offsets) and offsets[i] < offset:
                earlier = offsets[i]
                if not self.app_acked[earlier] and earlier not in mine:
                    raise Violation(f"key {event.key}: the application of {consumer} got "
                                    f"{offset} before {earlier} (acked by the broker: "
                                    f"{bool(self.acked[earlier])}, holder "
                                    f"{self.holder.get(earlier)})")
                i += 1
        held = self.app_held[consumer]
        if offset in held:  # a second copy: a nack sent before a seek took back the copy
            return          # sent after it, which is then sent again (at least once)
        held.add(offset)
        holders = self.app_slot_holders[event.slot]
        holders[consumer] = holders.get(consumer, 0) + 1

    def app_ack(self, consumer: str, offsets: list[int]) -> None:
        for offset in offsets:
            self.app_acked[offset] = 1
        self.app_release(consumer, offsets)

    def app_release(self, consumer: str, offsets: list[int]) -> None:
        """The application no longer holds these (acked, nacked or given up)."""
        held = self.app_held[consumer]
        for offset in offsets:
            if offset in held:
                held.discard(offset)
                slot = self.events[offset].slot
                holders = self.app_slot_holders[slot]
                holders[consumer] -= 1
                if not holders[consumer]:
                    del holders[consumer]

    def app_gone(self, consumer: str) -> None:
        self.app_release(consumer, sorted(self.app_held.get(consumer, set())))
        self.app_held.pop(consumer, None)

    # ------------------------------------------------------------ acks and give-backs

    def ack(self, consumer: str, offset: int) -> bool:
        """`consumer` acknowledges `offset`; True when the broker should count it."""
        if self.holder.get(offset) != consumer:
            return False
        self._release(offset)
        self.acked[offset] = 1
        self.counts.pop(offset, None)
        return True

    def give_back(self, offset: int, due_ms: int, failed: bool = True) -> None:
        """The broker takes `offset` back (nack, timeout, leave, rewind); not `failed`:
        the rest of a nacked slot, counted at least 1 (not one more), not dead-lettered."""
        self._release(offset)
        count = self.counts.get(offset, 0) + 1 if failed else max(self.counts.get(offset, 0), 1)
        self.counts[offset] = count
        if failed and self.max_redeliveries and count > self.max_redeliveries:
            self.dead.add(offset)
        else:
            self.given_back[offset] = due_ms

    def dead_lettered(self, offset: int, ok: bool, now_ms: int) -> None:
        if offset not in self.dead:
            raise Violation(f"offset {offset} dead-lettered but its count is "
                            f"{self.counts.get(offset, 0)} (max {self.max_redeliveries})")
        self.dead.discard(offset)
        if ok:
            self.acked[offset] = 1
            self.app_acked[offset] = 1
            self.counts.pop(offset, None)
        else:
            self.given_back[offset] = now_ms

    def _release(self, offset: int) -> None:
        consumer = self.holder.pop(offset)
        self.sent_ms.pop(offset, None)
        self.send_of.pop(offset, None)
        slot = self.events[offset].slot
        holders = self.slot_holders[slot]
        holders[consumer] -= 1
        if not holders[consumer]:
            del holders[consumer]

    def held_by(self, consumer: str) -> set[int]:
        return {o for o, c in self.holder.items() if c == consumer}

    # ------------------------------------------------------------ resets

    def seek(self, offset: int) -> None:
        """Everything below `offset` acknowledged, everything from it not; nothing held."""
        for o, event in enumerate(self.events):
            self.acked[o] = 1 if o < offset or not event.passes else 0
        self._forget_flight()

    def restart(self, acked_after: bytearray) -> None:
        """A broker crash: only what the persisted cursor says is acknowledged stays so."""
        self.acked[:] = acked_after
        self._forget_flight()

    def _forget_flight(self) -> None:
        self.app_acked[:] = self.acked
        self.app_held.clear()
        self.app_slot_holders.clear()
        self.app_first_open.clear()
        self.holder.clear()
        self.sent_ms.clear()
        self.send_of.clear()
        self.slot_holders.clear()
        self.given_back.clear()
        self.dead.clear()
        self.counts.clear()
        self.first_open.clear()
        self.slot_open.clear()

    # ------------------------------------------------------------ liveness

    def lowest_unacked(self) -> int:
        try:
            return self.acked.index(0)
        except ValueError:
            return self.end

    def waiting_of(self, slot: int) -> int | None:
        """The slot's lowest event that is neither acknowledged nor held (None: none)."""
        offsets = self.slot_offsets.get(slot, [])
        i = self.slot_open[slot]
        while i < len(offsets) and self.acked[offsets[i]]:
            i += 1
        self.slot_open[slot] = i
        while i < len(offsets):
            offset = offsets[i]
            if not self.acked[offset] and offset not in self.holder:
                return offset
            i += 1
        return None
