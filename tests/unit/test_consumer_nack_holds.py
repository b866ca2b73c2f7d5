"""A nack's hold on its slot survives deliveries of the consumer's other partitions;
records with a broadcast slots column can be nacked.

Goal (1): after the application nacks an event of partition 1, a later event of the
same slot that the broker sent before it saw the nack never reaches the
application ahead of the retry, even when a delivery of partition 0 that the
broker decided after the nack arrives first. Each partition's dispatcher queues
its own deliveries, but a send whose records it had to read from the store is
queued after the read (`dispatcher._unsent`), stamped with the nacks seen when it
was decided; so on one stream a partition-0 delivery stamped after the nack can
precede a partition-1 delivery stamped before it. Before, the partition-0
delivery ended the hold and the stale partition-1 event was handed out: the
application saw key k80's offset 1730 before the retry of its offset 594 (a
Key_Shared probe with two partitions, consumers nacking whole batches and a
broker restart; the broker had taken 1730 back with the nack and sent it again
later, to another consumer).

Goal (2): a record whose slots column is broadcast (one entry for all its events,
as the wire contract allows for any column, stored as sent: a raw or other-language
producer may send it) is nacked like any other. Before, `nack(message)` raised
ValueError (zip of offsets with the one-entry column) once such a record was
buffered, `nack(batch)` of one did, and so did the stale check in the receive
loop, which ended it: the consumer then received nothing more.

Method: a Consumer that is never attached (made on an event loop, as its channel
needs one), fed SubscribeResponses as its receive loop would hand them over
(`_handle`), its buffer read directly.
"""

from __future__ import annotations

import asyncio

from sdk.consumer import Consumer
from sdk.core.pb import keybus_pb2 as pb
from sdk.received import ReceivedBatch

SLOT = 4242


def delivery(partition: int, offsets: list[int], slots: list[int],
             nacks_seen: int) -> pb.SubscribeResponse:
    """A Delivery of one subset record part of `partition`, as the broker sends it."""
    record = pb.Record(topic="t", partition=partition, base_offset=offsets[0],
                       offsets=offsets, batch=pb.EventBatch(
                           count=len(offsets), key_ints=offsets, slots=slots,
                           values=[b"v"] * len(offsets)))
    return pb.SubscribeResponse(delivery=pb.Delivery(records=[record], nacks_seen=nacks_seen,
                                                     window_last_offsets=[offsets[-1]]))


def unattached_consumer(partitions: list[int]) -> Consumer:
    """A Consumer never attached, its permits granted for `partitions`."""
    async def make() -> Consumer:
        return Consumer("127.0.0.1:1", "t", "s", type="key_shared")

    consumer = asyncio.run(make())
    consumer._state.buffer.initial_grants(partitions)
    return consumer


def buffered(consumer: Consumer) -> list[tuple[int, list[int]]]:
    out = []
    while (batch := consumer._state.buffer.take()) is not None:
        assert isinstance(batch, ReceivedBatch)
        out.append((batch.partition, list(batch.offsets)))
    return out


def test_a_hold_ends_only_with_a_delivery_of_its_own_partition() -> None:
    consumer = unattached_consumer([0, 1])
    consumer._handle(delivery(1, [594], [SLOT], nacks_seen=0))
    taken = consumer._state.buffer.take()
    assert taken is not None
    consumer.nack(taken, delay_ms=50)  # nack 1: holds partition 1's slot from 594

    # partition 0's dispatcher decided this after it saw nack 1
    consumer._handle(delivery(0, [77], [SLOT], nacks_seen=1))
    # partition 1's dispatcher decided this before nack 1 (its record was read meanwhile):
    # the broker took 1730 back with the nack; 1731 is of another slot
    consumer._handle(delivery(1, [1730, 1731], [SLOT, SLOT + 1], nacks_seen=0))
    # the retry, decided after the nack
    consumer._handle(delivery(1, [594, 1730], [SLOT, SLOT], nacks_seen=1))

    assert buffered(consumer) == [(0, [77]), (1, [1731]), (1, [594, 1730])]


def test_records_with_a_broadcast_slots_column_are_nacked_like_any_other() -> None:
    consumer = unattached_consumer([0])
    consumer._handle(delivery(0, [0, 1, 2], [SLOT], nacks_seen=0))  # one entry, 3 events
    consumer._handle(delivery(0, [3, 4, 5], [SLOT], nacks_seen=0))
    first = consumer._state.buffer.take()
    assert isinstance(first, ReceivedBatch)
    message = first.messages()[0]
    consumer.nack(message, delay_ms=50)  # nack 1: the rest of the slot goes back with it
    assert buffered(consumer) == []
    # a delivery decided before nack 1 (stale: dropped), then the retry
    consumer._handle(delivery(0, [1, 2], [SLOT], nacks_seen=0))
    consumer._handle(delivery(0, [0, 1, 2, 3, 4, 5], [SLOT], nacks_seen=1))
    retry = consumer._state.buffer.take()
    assert isinstance(retry, ReceivedBatch) and list(retry.offsets) == [0, 1, 2, 3, 4, 5]
    consumer.nack(retry, delay_ms=50)  # a whole broadcast batch
    nacks = consumer._state.nacks
    assert [(p, list(o)) for p, o, _, _ in nacks] == [(0, [0]), (0, [0, 1, 2, 3, 4, 5])]
