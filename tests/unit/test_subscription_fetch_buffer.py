"""The consumer's client-side buffers: prefetch and permits, acks as ranges, nack holds.

Goal: acks leave as the fewest sorted half-open ranges (one packed field)
covering exactly the acknowledged offsets; the fetch buffer hands batches out in arrival order
and grants permits back Pulsar's way (the whole queue at open, then what was
taken once half of it was), so permits outstanding plus events buffered
never exceed the queue size of a partition, which many partitions share out
of a total bound; `remove` (a nack giving back
prefetched events) and `count_taken` (stale events given back unseen) return
their permits; `reset` (a reconnect) forgets everything; a nack holds its
slot until a delivery shows the broker saw that very nack (later nacks never
extend it), and events after the held offset in an older delivery go back.

Method: worked examples; a hypothesis property of `AckBuffer` against a
plain set model; and a RuleBasedStateMachine in which a fake
broker delivers at most the permits it was granted while the application
takes batches and nacks, checking the permit bound after every step.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sdk.core.offset_ranges import ranges_of_bounds
from sdk.core.pb import keybus_pb2 as pb
from sdk.fetch_buffer import AckBuffer, FetchBuffer, NackHolds
from sdk.received import ReceivedBatch, rest_of_slots_removed


@given(st.lists(st.lists(st.integers(0, 300), max_size=50), max_size=5),
       st.lists(st.tuples(st.integers(0, 300), st.integers(1, 20)), max_size=5))
def test_ack_buffer_sends_exactly_the_acked_offsets(chunks: list[list[int]],
                                                    spans: list[tuple[int, int]]) -> None:
    acks = AckBuffer()
    for chunk in chunks:
        acks.add(0, chunk)
    for start, n in spans:
        acks.add_range(0, start, start + n)
    expected = {o for chunk in chunks for o in chunk} | {o for a, n in spans
                                                         for o in range(a, a + n)}
    drained = acks.drain()
    starts, stops = ranges_of_bounds(drained.get(0, (b"", b""))[0])
    covered = [o for a, b in zip(starts.tolist(), stops.tolist(), strict=True)
               for o in range(a, b)]
    assert covered == sorted(expected)
    assert all(b < a for a, b in zip(starts[1:].tolist(), stops[:-1].tolist(), strict=True))


def test_nack_holds_end_on_their_own_nack() -> None:
    holds = NackHolds()
    holds.nacked(0, [10, 12], [5, 6])
    holds.queue()  # nack 1
    assert holds.stale_positions(0, [9, 11, 13], [5, 5, 6]) == [1, 2]
    holds.queue()  # nack 2: a give-back; it does not extend the hold of nack 1
    assert holds.seen(0, 0)  # a delivery planned before nack 1: stale
    assert not holds.seen(1, 0)  # the broker saw nack 1: the holds end
    assert not holds and holds.stale_positions(0, [11], [5]) == []
    holds.nacked(0, [20], [5])
    holds.queue()
    holds.reset(0)
    assert not holds and holds.queued == 0


def test_queue_size_below_two_is_refused() -> None:
    with pytest.raises(ValueError, match="need >= 2"):
        FetchBuffer[str](1)


def test_batches_come_out_in_arrival_order_and_grants_follow_takes() -> None:
    buffer = FetchBuffer[str](10)
    assert buffer.initial_grants([0, 1]) == [(0, 10), (1, 10)]
    buffer.put(0, 3, "a")
    buffer.put(1, 4, "b")
    buffer.put(0, 2, "c")
    assert (len(buffer), buffer.buffered_events) == (3, 9)
    assert buffer.take() == "a"
    assert not buffer.grant_wanted()  # 3 taken of partition 0: below half of 10
    assert buffer.take() == "b"
    assert buffer.take() == "c"
    assert buffer.grant_wanted()
    assert buffer.grants_due() == [(0, 5)]  # partition 1 took 4: not yet
    assert buffer.grants_due() == []
    assert buffer.take() is None
    assert buffer.buffered_events == 0


def test_many_partitions_share_the_total_bound() -> None:
    buffer = FetchBuffer[str](1000, total_max=50_000)
    grants = buffer.initial_grants(list(range(1024)))
    assert {permits for _, permits in grants} == {48}  # 50,000 // 1,024, not 1,000 each
    assert sum(permits for _, permits in grants) <= 50_000
    buffer.put(3, 24, "a")
    buffer.take()
    assert buffer.grants_due() == [(3, 24)]  # half of its own queue of 48
    assert buffer.initial_grants([0, 1]) == [(0, 1000), (1, 1000)]  # few: the queue size
    assert FetchBuffer[str](1000, total_max=100).initial_grants(list(range(200)))[0] == (0, 2)


def test_remove_cuts_batches_of_one_partition_and_returns_their_permits() -> None:
    buffer = FetchBuffer[list[int]](10)
    buffer.initial_grants([0, 1])
    buffer.put(0, 3, [1, 2, 3])
    buffer.put(1, 2, [4, 5])
    buffer.put(0, 2, [6, 7])

    def cut(batch: list[int]) -> tuple[list[int] | None, int]:
        kept = [o for o in batch if o % 2]
        return (kept or None), len(batch) - len(kept)

    buffer.remove(0, cut)
    assert buffer.buffered_events == 2 + 2 + 1
    assert buffer.take() == [1, 3]
    assert buffer.take() == [4, 5]
    assert buffer.take() == [7]  # [6] lost its only event... and 7 stayed
    assert buffer.grants_due() == [(0, 5)]  # 2 removed + 3 taken


def test_count_taken_and_reset() -> None:
    buffer = FetchBuffer[str](4)
    buffer.initial_grants([0])
    buffer.count_taken(0, 2)
    buffer.count_taken(7, 2)  # a partition this stream does not hold: ignored
    assert buffer.grants_due() == [(0, 2)]
    buffer.put(0, 1, "x")
    buffer.reset()
    assert (len(buffer), buffer.buffered_events, buffer.grants_due()) == (0, 0, [])
    assert buffer.take() is None


def test_ack_buffer_merges_per_partition_and_empties() -> None:
    acks = AckBuffer()
    acks.add(0, [4, 2, 3])
    acks.add(1, [])
    acks.add(0, range(5, 8))
    acks.add(2, [9])
    assert acks.count == 7
    acks.add_sent(2, 77, 100, 120)
    drained = acks.drain()
    assert {p: [r.tolist() for r in ranges_of_bounds(b)] for p, (b, _) in drained.items()} == \
        {0: [[2], [8]], 2: [[9], [10]]}
    assert np.frombuffer(drained[2][1], "<i8").tolist() == [77, 100, 120]
    assert drained[0][1] == b""
    assert acks.count == 0
    assert acks.drain() == {}


QUEUE = 8


class PermitMachine(RuleBasedStateMachine):
    """A fake broker that never sends more than it was granted, and an application
    that takes and nacks: outstanding permits + buffered events <= queue size."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer = FetchBuffer[list[int]](QUEUE)
        self.outstanding = dict(self.buffer.initial_grants([0, 1]))
        self.next_offset = 0

    @rule(partition=st.sampled_from([0, 1]), n=st.integers(1, QUEUE))
    def deliver(self, partition: int, n: int) -> None:
        n = min(n, self.outstanding[partition])
        if n:
            batch = list(range(self.next_offset, self.next_offset + n))
            self.next_offset += n
            self.outstanding[partition] -= n
            self.buffer.put(partition, n, batch)

    @precondition(lambda self: len(self.buffer) > 0)
    @rule()
    def take(self) -> None:
        assert self.buffer.take() is not None

    @rule(partition=st.sampled_from([0, 1]))
    def nack_prefetched(self, partition: int) -> None:
        self.buffer.remove(partition, lambda batch: (batch[:1], len(batch) - 1))

    @rule()
    def grant(self) -> None:
        for partition, count in self.buffer.grants_due():
            self.outstanding[partition] += count

    @invariant()
    def bounded(self) -> None:
        for partition in (0, 1):
            buffered = sum(n for p, n, _ in self.buffer._batches if p == partition)
            assert self.outstanding[partition] + buffered <= QUEUE
        assert self.buffer.buffered_events == sum(n for _, n, _ in self.buffer._batches)


TestPermitMachine = PermitMachine.TestCase
TestPermitMachine.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)


def test_a_nack_takes_back_the_rest_of_its_slots_buffered_or_not_handed_out() -> None:
    """`rest_of_slots_removed`: events of the nacked partition after their slot's first
    nacked offset leave the buffer and the messages not handed out; the rest stays."""
    def batch(partition: int, base: int, slots: list[int]) -> ReceivedBatch:
        keys = list(range(base, base + len(slots)))
        record = pb.Record(topic="t", partition=partition, base_offset=base, batch=pb.EventBatch(
            count=len(slots), key_ints=keys, slots=slots, values=[b"v"] * len(slots)))
        return ReceivedBatch(record, (), base + len(slots) - 1)

    buffer = FetchBuffer[ReceivedBatch](10)
    buffer.initial_grants([0, 1])
    buffer.put(0, 3, batch(0, 10, [7, 8, 7]))   # offsets 10, 11, 12
    buffer.put(1, 2, batch(1, 10, [7, 7]))      # another partition: untouched
    current = deque(batch(0, 4, [7, 9, 8]).messages())  # offsets 4, 5, 6, not handed out
    kept, removed = rest_of_slots_removed(buffer, current, 0, {7: 3, 8: 11})
    assert sorted(removed) == [4, 10, 12]  # slot 7 after 3; slot 8's 11 is the nacked one
    assert [(m.offset, m.event.slot) for m in kept] == [(5, 9), (6, 8)]
    left = buffer.take()
    assert left is not None and list(left.offsets) == [11]
    other = buffer.take()
    assert other is not None and other.partition == 1 and other.count == 2
    assert buffer.take() is None
