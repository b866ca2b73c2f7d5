"""Goal: the send queue (sdk/send_queue.py) names exactly the partitions that have a
request outstanding, which is what the producer's Nagle rule batches for, and keeps
the words of a retriable refusal for the producer's warning.

Method: drive a SendQueue through writes, answers, a retriable refusal (held) and a
broken stream with plain batches and tokens (no loop, no stream), and compare
`busy_partitions()` with what was written and not answered.
"""

from __future__ import annotations

from sdk import errors
from sdk.core.pb import keybus_pb2 as pb
from sdk.send_queue import ProducerBatch, SendQueue
from tests.unit.test_producer_columns import Token


def batch(partition: int) -> ProducerBatch:
    request = pb.ProduceRequest(topic="t", partition=partition)
    request.batch.key_ints.append(1)
    request.batch.values.append(b"v")
    return ProducerBatch(request, 1, Token(), deadline_ms=10_000, buffered=1)


def answer(request_id: int, partition: int, code: int = 0, message: str = "") -> pb.ProduceResponse:
    return pb.ProduceResponse(request_id=request_id, topic="t", partition=partition, count=1,
                              error_code=code, error_message=message)


def test_queued_and_written_partitions_are_busy_until_answered() -> None:
    queue = SendQueue("t", 3, idempotent=False)
    assert queue.busy_partitions() == set()
    queue.add(batch(0))
    queue.add(batch(2))
    assert queue.busy_partitions() == {0, 2}  # queued counts: the writer has not caught up
    first = queue.next_to_write(16)
    assert first is not None and queue.busy_partitions() == {0, 2}
    second = queue.next_to_write(16)
    assert second is not None
    queue.process_response(answer(first.request.request_id, 0))
    assert queue.busy_partitions() == {2}
    queue.process_response(answer(second.request.request_id, 2))
    assert queue.busy_partitions() == set()


def test_held_and_re_queued_partitions_stay_busy() -> None:
    queue = SendQueue("t", 2, idempotent=False)
    queue.add(batch(1))
    written = queue.next_to_write(16)
    assert written is not None
    queue.process_response(answer(written.request.request_id, 1, errors.UNAVAILABLE, "later"))
    assert queue.busy_partitions() == {1}  # held for the re-send after a reconnect
    queue.process_stream_broken()
    assert queue.busy_partitions() == {1}  # queued again for the next stream
    queue.process_fail_all(errors.ProducerClosed("closed"))
    assert queue.busy_partitions() == set()


def test_a_window_of_two_counts_a_partition_busy_from_its_second_outstanding_request() -> None:
    queue = SendQueue("t", 2, idempotent=False)
    queue.add(batch(0))
    assert queue.busy_partitions(window=2) == set()  # one queued: room for a second
    queue.add(batch(0))
    queue.add(batch(1))
    assert queue.busy_partitions(window=2) == {0}
    first = queue.next_to_write(16)
    assert first is not None and queue.busy_partitions(window=2) == {0}  # written + queued
    queue.process_response(answer(first.request.request_id, 0))
    assert queue.busy_partitions(window=2) == set()
    assert queue.busy_partitions() == {0, 1}  # the default window is one request


def test_a_retriable_refusal_keeps_the_brokers_words_until_the_stream_is_replaced() -> None:
    queue = SendQueue("t", 1, idempotent=False)
    queue.add(batch(0))
    written = queue.next_to_write(16)
    assert written is not None and queue.refusal == ""
    said = "broker b:1 lost its ZooKeeper connection and cannot confirm that it still leads"
    queue.process_response(answer(written.request.request_id, 0, errors.UNAVAILABLE, said))
    assert queue.reconnect_requested and queue.refusal == said  # the sender's warning says it
    queue.process_stream_broken()
    assert queue.refusal == ""  # a later stream's end is not blamed on it



def test_a_conflict_fails_its_batch_alone_and_the_numbering_stands() -> None:
    """The broker's producer_id_conflict (other events stored under this id and
    sequence) is no sequence gap to re-send (that would collide again five
    times and then shift every later sequence): the batch fails with it, the
    next batch stays on the stream with its sequence, no new id is asked."""
    queue = SendQueue("t", 1, idempotent=True)
    queue.reinit((1 << 63) | 5, [0])
    queue.add(batch(0))
    queue.add(batch(0))
    first, second = queue.next_to_write(16), queue.next_to_write(16)
    assert first is not None and second is not None
    said = ("sequence=0 of producer 9223372036854775813 on 't'/0 was stored at offset 0 with "
            "other events: another producer is using this producer id (a chosen id must be "
            "used by one producer at a time); this request was not stored")
    outcomes = queue.process_response(
        answer(first.request.request_id, 0, errors.FAILED_PRECONDITION, said))
    assert [b for b, _ in outcomes] == [first]
    error = outcomes[0][1]
    assert isinstance(error, errors.SequenceError) and error.kind == "conflict"
    assert not queue.needs_reinit and queue.pending() == [second]
    assert second.sequence == 1 and queue.next_sequences == [2]
