"""The dispatch core (`PartitionCore`), rule by rule, on worked examples.

Goal: each rule of `core.py` shown on a small case with the numbers visible:
a stalled owner's slots wait on a floor after a few events while the
partition reads on; they catch up in order once it has permits; a nack
delay holds its slot and the retried event goes first; a moved slot drains;
a leaver's events go first to the new owner; acks count only what the
consumer holds; ack timeouts, dead letters, seek, cumulative acks, a restart
from the persisted cursor, Shared, Failover, pausing and refusals.

Method: a list-backed log served through the real `log_reader.scan`, and a
`drive` loop that runs rounds as the dispatcher does until nothing moves.
The simulation (tests/sim/) covers the same rules under random schedules.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from broker.subscription.core import (
    CoreLimits,
    Kind,
    Mode,
    PartitionCore,
    PermitsInvalid,
)
from broker.subscription.cursor import Cursor
from broker.subscription.log_reader import scan
from broker.subscription.members import MemberSpec
from broker.subscription.selector import SelectorError
from sdk.core.hashing import SLOT_COUNT
from sdk.core.model import HashRange

LOW, HIGH = 10, 40_000  # a slot of consumer "a" and one of "b" (sticky halves)


@dataclass
class Record:
    base: int
    count: int
    slots: np.ndarray

    @property
    def end(self) -> int:
        return self.base + self.count

    @property
    def size(self) -> int:
        return self.count


class Log:
    def __init__(self) -> None:
        self.records: list[Record] = []
        self.end = 0

    def append(self, *slots: int) -> list[int]:
        self.records.append(Record(self.end, len(slots), np.array(slots, np.int32)))
        self.end += len(slots)
        return list(range(self.end - len(slots), self.end))

    def from_(self, start: int) -> list[Record]:
        return [r for r in self.records if r.end > start]


def sticky(kind: Kind = Kind.KEY_SHARED, **limits: int) -> PartitionCore:
    core = PartitionCore(kind, Mode.STICKY, 0, CoreLimits(**limits), Cursor(0), 0)
    core.process_attach(MemberSpec("a", sticky_ranges=(HashRange(0, 32767),)), 0)
    core.process_attach(MemberSpec("b", sticky_ranges=(HashRange(32768, 65535),)), 0)
    core.take_notices()
    return core


def drive(core: PartitionCore, log: Log, now: int = 0, rounds: int = 50) -> dict[str, list[int]]:
    """Rounds until nothing moves: consumer -> offsets sent, in order."""
    got: dict[str, list[int]] = {}
    for _ in range(rounds):
        core.process_tick(now)
        core.dispatch(now)
        request = core.next_read(log.end)
        if request is not None:
            _, result = scan(request, log.from_(request.start), lambda r: None, 1 << 30)
            core.process_read(request, result, now)
        sends = core.take_sends()
        for send in sends:
            got.setdefault(send.consumer, []).extend(send.events.offsets.tolist())
        if request is None and not sends:
            break
    return got


def ranges(*offsets: int) -> tuple[np.ndarray, np.ndarray]:
    values = np.array(sorted(offsets), np.int64)
    return values, values + 1


def test_a_stalled_owner_costs_a_floor_and_the_rest_flows() -> None:
    core = sticky(waiting_slot_events_max=2, read_events_max=4)
    log = Log()
    for _ in range(10):
        log.append(LOW, HIGH)
    core.process_permits("b", 100)  # a has no permits: its slot waits
    got = drive(core, log)
    assert got == {"b": list(range(1, 20, 2))}  # b got all of its slot, in order
    assert core.position == 20  # the main read never waited for a's slot
    assert len(core.pending) == 2 and core.slots.floors == {LOW: 4}  # two kept, then a floor
    core.process_permits("a", 100)
    got = drive(core, log)
    assert got == {"a": list(range(0, 20, 2))}  # its events, in order, read again from 4
    assert core.slots.floors == {} and len(core.pending) == 0


def test_a_nack_holds_its_slot_until_due_and_goes_first() -> None:
    core = sticky()
    log = Log()
    log.append(LOW, LOW, HIGH)
    core.process_permits("a", 10)
    core.process_permits("b", 10)
    assert drive(core, log) == {"a": [0, 1], "b": [2]}
    core.process_nack("a", *ranges(0, 1), 500, 0)  # both back, due at 500
    log.append(LOW, HIGH)
    assert drive(core, log, now=100) == {"b": [4]}  # a's slot waits out the delay
    got = drive(core, log, now=500)
    assert got == {"a": [0, 1, 3]}
    events = core.members["a"].holding.live()
    assert events.counts.tolist() == [1, 1, 0]  # redelivery counts travel with them


def test_acks_count_only_what_the_consumer_holds() -> None:
    core = sticky()
    log = Log()
    log.append(LOW, HIGH, LOW)
    core.process_permits("a", 10)
    core.process_permits("b", 10)
    drive(core, log)
    assert core.process_ack("a", np.array([0], np.int64), np.array([3], np.int64)) == 2
    assert core.process_ack("a", *ranges(1)) == 0  # b's event: not a's to acknowledge
    assert core.process_ack("nobody", *ranges(1)) == 0
    assert core.mark_delete() == 1
    assert core.process_ack("b", *ranges(1)) == 1 and core.mark_delete() == 3


def test_a_moved_slot_drains_then_goes_to_its_new_owner() -> None:
    core = PartitionCore(Kind.KEY_SHARED, Mode.AUTO_SPLIT, 0, CoreLimits(), Cursor(0), 0)
    core.process_attach(MemberSpec("a"), 0)
    core.process_permits("a", 10)
    log = Log()
    log.append(HIGH, HIGH)
    assert drive(core, log) == {"a": [0, 1]}
    core.process_attach(MemberSpec("b"), 0)  # b takes the upper half: HIGH moves to b
    notices = {n.consumer: n.ranges for n in core.take_notices()}
    assert notices == {"a": (HashRange(0, 32767),), "b": (HashRange(32768, 65535),)}
    core.process_permits("b", 10)
    log.append(HIGH)
    assert drive(core, log) == {}  # a still holds 0 and 1 of the slot
    assert core.slots.draining == {HIGH: ["a", 2]}
    core.process_ack("a", *ranges(0))
    assert drive(core, log) == {}
    core.process_ack("a", *ranges(1))
    assert drive(core, log) == {"b": [2]}


def test_a_leaver_events_come_first_to_the_heir() -> None:
    core = PartitionCore(Kind.KEY_SHARED, Mode.AUTO_SPLIT, 0, CoreLimits(), Cursor(0), 0)
    for name in ("a", "b"):
        core.process_attach(MemberSpec(name), 0)
        core.process_permits(name, 10)
    log = Log()
    log.append(HIGH, LOW, HIGH)
    assert drive(core, log) == {"a": [1], "b": [0, 2]}
    core.process_detach("b", 5)
    log.append(HIGH)
    assert drive(core, log, now=5) == {"a": [0, 2, 3]}
    assert core.members["a"].holding.live().counts.tolist() == [1, 0, 1, 0]


def test_ack_timeout_gives_back_what_outlived_it() -> None:
    core = PartitionCore(Kind.SHARED, 0, 0, CoreLimits(), Cursor(0), 0)
    core.process_attach(MemberSpec("a", ack_timeout_ms=1000), 0)
    core.process_permits("a", 10)
    log = Log()
    log.append(LOW, HIGH)
    assert drive(core, log) == {"a": [0, 1]}
    core.process_ack("a", *ranges(1))
    assert core.next_due_ms(500) == 1000
    assert drive(core, log, now=999) == {}
    assert drive(core, log, now=1000) == {"a": [0]}
    assert core.members["a"].holding.live().counts.tolist() == [1]


def test_dead_letters_after_max_redeliveries() -> None:
    core = sticky(max_redeliveries=1)
    log = Log()
    log.append(LOW, LOW)
    core.process_permits("a", 10)
    drive(core, log)
    core.process_nack("a", *ranges(0, 1), 0, 0)
    assert drive(core, log) == {"a": [0, 1]}
    core.process_nack("a", *ranges(0), 0, 0)  # the second time: past max_redeliveries
    dead = core.take_dead_letters()
    assert dead.offsets.tolist() == [0] and dead.counts.tolist() == [2]
    core.process_ack("a", *ranges(1))
    assert drive(core, log) == {}  # the slot waits while its event goes to the topic
    core.process_dead_lettered(dead, True, 0)
    assert core.mark_delete() == 2 and drive(core, log) == {}


def test_seek_and_cumulative_ack() -> None:
    core = PartitionCore(Kind.EXCLUSIVE, 0, 0, CoreLimits(), Cursor(0), 0)
    core.process_attach(MemberSpec("a"), 0)
    core.process_permits("a", 100)
    log = Log()
    log.append(*range(6))
    assert drive(core, log) == {"a": [0, 1, 2, 3, 4, 5]}
    core.process_ack_cumulative("a", 4)
    assert core.mark_delete() == 4
    core.process_seek(2)
    assert core.members["a"].holding.count == 0
    assert drive(core, log) == {"a": [2, 3, 4, 5]}


def test_a_seek_forgets_sends_not_yet_taken_and_gives_their_permits_back() -> None:
    """A send decided before a seek but not yet sent is from the old position: it is
    dropped, and its permits come back (the SDK grants permits for what it receives,
    so permits spent on events never sent would be gone for good)."""
    core = PartitionCore(Kind.EXCLUSIVE, 0, 0, CoreLimits(), Cursor(0), 0)
    core.process_attach(MemberSpec("a"), 0)
    core.process_permits("a", 4)
    log = Log()
    log.append(*range(6))
    request = core.next_read(log.end)
    assert request is not None
    _, result = scan(request, log.from_(request.start), lambda r: None, 1 << 30)
    core.process_read(request, result, 0)
    core.dispatch(0)
    assert core.members["a"].permits == 0  # offsets 0..3 decided, not taken
    core.process_seek(2)
    assert core.take_sends() == []
    assert drive(core, log) == {"a": [2, 3, 4, 5]}


def test_a_restart_reads_from_the_mark_delete_and_skips_what_was_acked() -> None:
    core = sticky()
    log = Log()
    log.append(LOW, HIGH, LOW, HIGH)
    core.process_permits("a", 10)
    core.process_permits("b", 10)
    drive(core, log)
    core.process_ack("b", *ranges(1, 3))
    saved = Cursor.from_bytes(core.snapshot().to_bytes())
    assert (saved.mark_delete, saved.horizon) == (0, 4)
    again = PartitionCore(Kind.KEY_SHARED, Mode.STICKY, 0, CoreLimits(), saved, 0)
    for name, r in (("a", HashRange(0, 32767)), ("b", HashRange(32768, 65535))):
        again.process_attach(MemberSpec(name, sticky_ranges=(r,)), 0)
        again.process_permits(name, 10)
    assert drive(again, log) == {"a": [0, 2]}  # b's acked events are not sent again


def test_failover_rewinds_to_the_new_active_and_tells_everyone() -> None:
    core = PartitionCore(Kind.FAILOVER, 0, 0, CoreLimits(), Cursor(0), 0)
    core.process_attach(MemberSpec("b", priority=1), 0)
    core.process_permits("b", 10)
    log = Log()
    log.append(LOW, HIGH)
    assert drive(core, log) == {"b": [0, 1]}
    core.take_notices()
    core.process_attach(MemberSpec("a", priority=0), 0)
    assert {(n.consumer, n.active) for n in core.take_notices()} == {("a", True), ("b", False)}
    core.process_permits("a", 10)
    assert drive(core, log) == {"a": [0, 1]}


def test_a_paused_consumer_waits_like_one_without_permits() -> None:
    core = sticky()
    log = Log()
    log.append(LOW)
    core.process_permits("a", 10)
    core.process_pause("a", True)
    assert drive(core, log) == {}
    core.process_pause("a", False)
    assert drive(core, log) == {"a": [0]}


def test_refusals_change_nothing() -> None:
    core = sticky()
    with pytest.raises(PermitsInvalid, match="count=0"):
        core.process_permits("a", 0)
    with pytest.raises(PermitsInvalid, match="at most 100000 outstanding"):
        core.process_permits("a", 100_001)
    with pytest.raises(SelectorError, match="overlaps"):
        core.process_attach(MemberSpec("c", sticky_ranges=(HashRange(5, 6),)), 0)
    assert sorted(core.members) == ["a", "b"]
    with pytest.raises(SelectorError):
        core.check_attach(MemberSpec("a", sticky_ranges=(HashRange(5, 6),)), 0)
    assert len(core._owners) == SLOT_COUNT


def test_waiting_slots_say_why_and_how_many() -> None:
    from broker.subscription.stats import REASON_NAMES, waiting_slots

    core = sticky(waiting_slot_events_max=1, read_events_max=3)
    core.process_detach("b", 0)  # HIGH has no owner now
    log = Log()
    log.append(LOW, LOW, LOW, HIGH, HIGH, LOW)
    core.process_permits("a", 1)
    assert drive(core, log) == {"a": [0]}  # then LOW waits: one in memory, the rest floored
    waiting = waiting_slots(core)
    found = {s: (REASON_NAMES[r], e) for s, r, e in zip(
        waiting.slots.tolist(), waiting.reasons.tolist(), waiting.events.tolist(), strict=True)}
    assert found == {LOW: ("no_permits", 3), HIGH: ("no_owner", 2)}
    assert waiting.slots.tolist() == [LOW, HIGH]  # most events first
