"""Where a consumer's share of a window ends: the broker says it, the SDK reads it.

Goal: a Key_Shared consumer learns from the broker whether more of a window
follows for it (`Delivery.open_windows`), so a Databus consumer closes its
share at once instead of after its linger, and never because the broker was
slow. Shown here, piece by piece:
- the core: a window stays open for a consumer exactly while events of it
  that the consumer owns were not sent (no permits, behind a floor, not read),
  and not for events another consumer owns;
- the shell's helper: a later send to the same consumer keeps the window open;
- the wire: an open window is listed, a part split over messages is open in
  all but its last message, and the C fast path is left when one is open;
- the SDK: each batch says whether the share ends with it; the framing closes
  a marked share at once and waits (the linger) for one said to continue.
The end-to-end proof, with a real broker, is
tests/integration/test_databus_share_ends.py.
"""

from __future__ import annotations

import numpy as np

from broker.subscription.core import CoreLimits, Kind, Mode, PartitionCore, Send
from broker.subscription.cursor import Cursor
from broker.subscription.delivery import CachedRecord, RecordCache, delivery_messages
from broker.subscription.holdings import Taken
from broker.subscription.share_ends import open_windows
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus.framing import Emit, Part, ShareAssembler
from sdk.received import delivered_batches
from tests.unit.test_subscription_core import HIGH, LOW, Log, drive, sticky


def _record(base: int, slots: list[int], value_bytes: int = 10) -> CachedRecord:
    count = len(slots)
    record = pb.Record(topic="t", partition=0, base_offset=base, scn_first=base + 1,
                       window=True)
    record.batch.count = count
    record.batch.key_ints.extend(range(count))
    record.batch.values.extend([b"v" * value_bytes] * count)
    record.batch.slots.extend(slots)
    return CachedRecord(base, count, record.SerializeToString(), record,
                        np.array(slots, np.int32))


def _open_of(message: bytes) -> list[int]:
    return list(pb.SubscribeResponse.FromString(message).delivery.open_windows)


# ---------------------------------------------------------------- the core


def test_a_window_stays_open_while_its_owner_lacks_permits_and_ends_with_its_last_event(
) -> None:
    core = sticky(waiting_slot_events_max=100)
    log = Log()
    log.append(LOW, LOW, LOW, HIGH)  # offsets 0-2 are a's, 3 is b's
    core.process_permits("a", 2)
    core.process_permits("b", 10)
    assert drive(core, log) == {"a": [0, 1], "b": [3]}
    offsets, slots = np.arange(4, dtype=np.int64), log.records[0].slots
    assert core.may_hold_unsent(4)
    assert core.holds_unsent("a", offsets, slots)  # offset 2 waits for a's permits
    assert not core.holds_unsent("b", offsets, slots)  # b's share is whole
    core.process_permits("a", 2)
    assert drive(core, log) == {"a": [2]}
    assert not core.holds_unsent("a", offsets, slots)
    assert not core.may_hold_unsent(4)  # following the tail: nothing to ask


def test_events_behind_a_floor_keep_the_window_open() -> None:
    core = sticky(waiting_slot_events_max=1, read_events_max=100)
    log = Log()
    log.append(LOW, HIGH, LOW, LOW)
    core.process_permits("b", 10)
    assert drive(core, log) == {"b": [1]}  # a has no permits: one kept, then a floor
    assert core.slots.floors  # offset 3 lies behind the floor, 2 waits in memory
    offsets, slots = np.arange(4, dtype=np.int64), log.records[0].slots
    assert core.holds_unsent("a", offsets, slots)
    assert not core.holds_unsent("b", offsets, slots)


def test_a_window_not_read_whole_yet_is_open() -> None:
    core = sticky()
    slots = np.array([LOW, HIGH], np.int32)
    assert core.holds_unsent("a", np.array([0, 1], np.int64), slots)  # position 0: unread
    assert not core.holds_unsent("nobody", np.array([0, 1], np.int64), slots)


# ---------------------------------------------------------------- the shell's helper


def test_a_later_send_to_the_same_consumer_keeps_the_window_open() -> None:
    core = sticky()
    core.position = 10  # read past the record, nothing waits
    cache = RecordCache(1 << 20)
    entry = _record(0, [LOW] * 10)
    cache.add(entry)
    first = Send("a", Taken(np.arange(0, 5, dtype=np.int64), entry.slots[:5],
                            np.zeros(5, np.int32)), 1)
    second = Send("a", Taken(np.arange(5, 10, dtype=np.int64), entry.slots[5:],
                             np.zeros(5, np.int32)), 2)
    assert open_windows(core, cache, [first, second]) == [frozenset({9}), frozenset()]
    assert open_windows(core, cache, [first], [entry]) == [frozenset()]


def test_shared_subscriptions_mark_nothing() -> None:
    core = PartitionCore(Kind.SHARED, Mode.STICKY, 0, CoreLimits(), Cursor(0), 0)
    send = Send("a", Taken(np.arange(2, dtype=np.int64), np.zeros(2, np.int32),
                           np.zeros(2, np.int32)), 1)
    assert open_windows(core, RecordCache(1 << 20), [send]) == [frozenset()]


# ---------------------------------------------------------------- the wire


def test_an_open_window_is_listed_and_a_closed_one_is_not() -> None:
    entry = _record(100, [LOW] * 6)
    cache = RecordCache(1 << 20)
    cache.add(entry)
    part = np.array([100, 102], np.int64)
    (closed,), _ = delivery_messages(cache, part, None, 0, 1 << 20, 7, entry)
    (opened,), _ = delivery_messages(cache, part, None, 0, 1 << 20, 7, entry, frozenset({105}))
    assert _open_of(closed) == [] and _open_of(opened) == [105]
    unmarked = pb.SubscribeResponse.FromString(opened)
    unmarked.delivery.ClearField("open_windows")
    assert unmarked == pb.SubscribeResponse.FromString(closed)  # the same message otherwise


def test_a_part_split_over_messages_is_open_in_all_but_its_last() -> None:
    entry = _record(0, [LOW] * 40, value_bytes=100)
    cache = RecordCache(1 << 20)
    cache.add(entry)
    messages, _ = delivery_messages(cache, np.arange(0, 39, dtype=np.int64), None, 0, 1_500, 3,
                                    entry)
    assert len(messages) > 2
    assert [_open_of(m) for m in messages] == [[39]] * (len(messages) - 1) + [[]]
    batches = [b for m in messages
               for b in delivered_batches(pb.SubscribeResponse.FromString(m).delivery, True)]
    assert [b.share_ends for b in batches] == [False] * (len(batches) - 1) + [True]


# ---------------------------------------------------------------- the SDK


def test_each_batch_says_whether_its_share_ends_only_when_the_broker_marks() -> None:
    delivery = pb.Delivery(window_last_offsets=[9, 9, 19], open_windows=[19])
    for base, count in ((0, 2), (2, 3), (10, 1)):
        record = delivery.records.add(partition=0, base_offset=base, window=True)
        record.batch.count = count
    assert [b.share_ends for b in delivered_batches(delivery, True)] == [False, True, False]
    assert [b.share_ends for b in delivered_batches(delivery)] == [None, None, None]


def _part(offset: int, ends: bool | None) -> Part:
    return Part(0, 5, offset, offset, 9, True, 1, offset, ends)


def test_a_share_marked_ended_closes_at_once_buffered_and_streamed() -> None:
    for buffering in (True, False):
        framing = ShareAssembler(buffering, linger_ms=60_000, bytes_max=1 << 20)
        out = framing.process_part(_part(2, False), 0)
        assert not any(isinstance(o, Emit) and o.closes for o in out)
        out = framing.process_part(_part(4, True), 1)
        assert [o.closes for o in out if isinstance(o, Emit)][-1] is True
        assert not framing.holding()


def test_a_share_said_to_continue_waits_for_its_linger() -> None:
    framing = ShareAssembler(True, linger_ms=250, bytes_max=1 << 20)
    assert framing.process_part(_part(2, False), 0) == []
    assert framing.process_idle(249) == [] and framing.holding()
    (emit,) = framing.process_idle(250)  # more was said to follow, and nothing came
    assert isinstance(emit, Emit) and emit.closes
