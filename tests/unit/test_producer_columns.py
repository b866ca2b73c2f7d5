"""Goal: the producer's additions for callers that pick their own producer id
and send per-event columns (the Spark writer) obey their rules without a broker:
a chosen id needs the high bit, starts every partition at sequence 0, and
a duplicate's result carries the batch that was sent; per-event columns are
checked entry by entry and stay aligned with their events.

Method: call the pure pieces directly (`check_producer_id`, `event_columns`,
the Sender's `SendQueue` fed hand-made ProduceResponses) and check the
EventBatch they lead to with the shared core decoder (`record_events`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdk.accumulator import event_columns, fill_batch
from sdk.core.columns import record_events
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.producer import Producer, _columns_of_part
from sdk.sender import (
    PRODUCER_ID_CHOSEN_BIT,
    PRODUCER_ID_MAX,
    BatchResult,
    ProducerBatch,
    SendQueue,
    check_producer_id,
)


class Token:
    """A completion that records what it was given (no event loop)."""

    def __init__(self) -> None:
        self.outcome: Any = None

    def done(self) -> bool:
        return self.outcome is not None

    def set_result(self, result: BatchResult) -> None:
        self.outcome = result

    def set_exception(self, exception: BaseException) -> None:
        self.outcome = exception


def _batch(partition: int, keys: list[int]) -> ProducerBatch:
    request = pb.ProduceRequest(topic="t", partition=partition)
    fill_batch(request.batch, keys, [b"v"] * len(keys), slots_of(keys))
    return ProducerBatch(request, len(keys), Token(), deadline_ms=10**12, buffered=len(keys))


@pytest.mark.parametrize("producer_id", [PRODUCER_ID_CHOSEN_BIT, PRODUCER_ID_MAX,
                                         PRODUCER_ID_CHOSEN_BIT | 12345])
def test_a_chosen_id_with_the_high_bit_is_accepted(producer_id: int) -> None:
    assert check_producer_id(producer_id) == producer_id


@pytest.mark.parametrize("producer_id", [0, 1, PRODUCER_ID_CHOSEN_BIT - 1, PRODUCER_ID_MAX + 1,
                                         -1, True, "123", 2.0**63, None])
def test_a_chosen_id_without_the_high_bit_is_refused(producer_id: Any) -> None:
    with pytest.raises(ValueError, match="producer_id"):
        check_producer_id(producer_id)


def test_create_refuses_a_bad_id_before_connecting() -> None:
    async def create(**options: Any) -> Producer:
        # Port 1: nothing listens; the check must fail first.
        return await Producer.create("127.0.0.1:1", "t", **options)

    with pytest.raises(ValueError, match="high bit"):
        asyncio.run(create(producer_id=42))
    with pytest.raises(ValueError, match="idempotent=True"):
        asyncio.run(create(producer_id=PRODUCER_ID_CHOSEN_BIT, idempotent=False))


def test_a_chosen_id_numbers_every_partition_from_zero() -> None:
    queue = SendQueue("t", partitions=2, idempotent=True)
    chosen = PRODUCER_ID_CHOSEN_BIT | 7
    queue.reinit(chosen, [0, 0])
    batches = [_batch(p, [i]) for i, p in enumerate([0, 1, 0, 0, 1])]
    for batch in batches:
        queue.add(batch)
    written = [queue.next_to_write(in_flight_max=16) for _ in batches]
    assert [(b.request.producer_id, b.partition, b.sequence) for b in written if b] == [
        (chosen, 0, 0), (chosen, 1, 0), (chosen, 0, 1), (chosen, 0, 2), (chosen, 1, 1)]


def test_only_a_duplicate_result_carries_the_sent_batch() -> None:
    queue = SendQueue("t", partitions=1, idempotent=True)
    queue.reinit(PRODUCER_ID_CHOSEN_BIT, [0])
    fresh, retried = _batch(0, [1, 2]), _batch(0, [3])
    queue.add(fresh)
    queue.add(retried)
    for batch in (queue.next_to_write(16), queue.next_to_write(16)):
        assert batch is not None
    answers = [pb.ProduceResponse(request_id=fresh.request.request_id, base_offset=10, count=2),
               pb.ProduceResponse(request_id=retried.request.request_id, base_offset=4, count=1,
                                  duplicate=True)]
    results = [result for answer in answers for _, result in queue.process_response(answer)]
    assert isinstance(results[0], BatchResult) and isinstance(results[1], BatchResult)
    assert (results[0].duplicate, results[0].sent_batch) == (False, None)
    assert results[1].duplicate and results[1].base_offset == 4
    assert results[1].sent_batch == retried.request.batch


def test_event_columns_normalise_and_leave_out_what_was_not_given() -> None:
    columns = event_columns(3, sources=["a", "", "c"], opcodes=[pb.UPSERT, pb.DELETE, 0],
                            headers=[{"h": "x"}, None, {}], event_times_ms=[5, 0, 7])
    assert columns == {"sources": ["a", "", "c"], "opcodes": [0, 1, 0],
                       "headers": [{"h": b"x"}, {}, {}], "event_times_ms": [5, 0, 7]}
    assert event_columns(2) == {}


@pytest.mark.parametrize("options, message", [
    ({"sources": ["a"]}, r"sources must be a list with one entry per key \(2\); got 1"),
    ({"sources": "ab"}, "sources must be a list"),
    ({"sources": ["a", 3]}, r"sources\[1\] must be a str"),
    ({"schemas": [None, "s"]}, r"schemas\[0\] must be a str"),
    ({"opcodes": [0, 2]}, r"opcodes\[1\] is 2"),
    ({"opcodes": [False, 0]}, r"opcodes\[0\] is False"),
    ({"headers": [{"h": 1}, None]}, r"headers\[0\]\['h'\] must be bytes"),
    ({"headers": [{}, ["x"]]}, r"headers\[1\] must be a dict"),
    ({"event_times_ms": [1, 1.5]}, r"event_times_ms\[1\] must be an int"),
])
def test_event_columns_name_the_first_bad_entry(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        event_columns(2, **options)


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["", "a", "b"]),
                          st.sampled_from([pb.UPSERT, pb.DELETE]), st.integers(0, 10**13)),
                min_size=1, max_size=40))
def test_per_event_columns_stay_with_their_events(rows: list[tuple[int, str, int, int]]) -> None:
    """Split by partition as send_batch does, encode, decode: each event keeps its fields."""
    n = len(rows)
    columns = event_columns(n, sources=[r[1] for r in rows], opcodes=[r[2] for r in rows],
                            event_times_ms=[r[3] for r in rows])
    for partition in range(4):
        indexes = [i for i, r in enumerate(rows) if r[0] == partition]
        if not indexes:
            continue
        part = _columns_of_part(columns, indexes, n)
        batch = pb.EventBatch()
        fill_batch(batch, indexes, [b"v"] * len(indexes), slots_of(indexes), part)
        record = pb.Record(topic="t", scn_first=1)
        record.batch.CopyFrom(batch)
        got = [(e.key, e.source, e.opcode, e.event_time_ms) for e in record_events(record)]
        assert got == [(i, rows[i][1], rows[i][2], rows[i][3]) for i in indexes]


def test_columns_of_a_partition_holding_every_event_are_not_copied() -> None:
    columns = {"sources": ["a", "b"]}
    assert _columns_of_part(columns, [0, 1], 2) is columns
    assert _columns_of_part(columns, [1], 2) == {"sources": ["b"]}

