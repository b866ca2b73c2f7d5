"""Sends one Spark write task's batches so that a retried task stores nothing twice.

Rules:
1. A task's producer id is derived from what stays the same when Spark runs
   the task again: the write (a batch write's id, or a streaming query's id
   and micro-batch id) and the task's partition (`task_producer_id`). Each
   (topic, partition) gets sequences 0, 1, 2, ... in the order the task
   produces batches. A retried attempt therefore re-sends the same
   (producer id, sequence) pairs, and the broker answers those it has
   stored with `duplicate` and the original offsets instead of storing them.
2. A duplicate is trusted only after reading the stored batch back and
   finding it equal to the one sent. If it differs (the task's input
   changed between attempts: nondeterministic upstream, such as the row
   order after a shuffle) or the broker no longer keeps that sequence's
   result (more than 64 batches ago), the batch is sent again under a fresh
   producer id from InitProducer: a possible duplicate, never a loss.
3. Any other refusal or a broken stream fails the task; Spark retries it
   and rule 1 makes the retry safe.

Runs inside a Spark task; the stub comes from `_client.connect`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from spark_connector import _client

FAILED_PRECONDITION = 9
_HIGH_BIT = 1 << 63  # keeps derived ids apart from the broker's counter (1, 2, 3, ...)


def task_producer_id(write_id: str, task_partition: int) -> int:
    """A producer id that is the same for every attempt of one write task (rule 1)."""
    digest = hashlib.blake2b(f"keybus-spark:{write_id}:{task_partition}".encode(),
                             digest_size=8).digest()
    return int.from_bytes(digest, "big") | _HIGH_BIT


@dataclass
class WriteStats:
    """What one task sent, for its commit message."""

    events: int = 0
    batches: int = 0
    duplicates: int = 0  # events the broker already had from an earlier attempt
    resent: int = 0  # events sent again under a fresh id (rule 2)


class TaskProducer:
    """Pipelined, deduplicated sends of one task (see module rules)."""

    def __init__(self, stub: pb_grpc.KeybusStub, broker: str, producer_id: int | None,
                 in_flight_max: int) -> None:
        self.stub = stub
        self.broker = broker
        self.in_flight_max = in_flight_max
        self.stats = WriteStats()
        self._producer_id = producer_id
        self._fresh_id: int | None = None
        self._next_sequence: dict[tuple[int, str, int], int] = {}
        self._stream = _client.ProduceStream(stub, broker, in_flight_max)

    def send(self, topic: str, partition: int, batch: pb.EventBatch) -> None:
        """Queue one batch; waits for answers only when the pipeline is full."""
        if self._producer_id is None:
            self._producer_id = _client.init_producer(self.stub, self.broker, topic)
        self._submit(topic, partition, batch, self._producer_id)
        self.stats.batches += 1

    def finish(self) -> WriteStats:
        """Wait until every batch is answered (and re-sent where rule 2 says).

        Raises:
            BrokerCallError: a batch was refused, or the stream broke.
        """
        try:
            while self._stream.in_flight:
                self._process(*self._stream.next_response())
        finally:
            self._stream.close()
        return self.stats

    def abort(self) -> None:
        self._stream.close()

    def _submit(self, topic: str, partition: int, batch: pb.EventBatch, producer_id: int) -> None:
        while len(self._stream.in_flight) >= self.in_flight_max:
            self._process(*self._stream.next_response())
        key = (producer_id, topic, partition)
        sequence = self._next_sequence.get(key, 0)
        self._next_sequence[key] = sequence + 1
        request = pb.ProduceRequest(topic=topic, partition=partition, producer_id=producer_id,
                                    sequence=sequence)
        request.batch.CopyFrom(batch)
        self._stream.submit(request)

    def _process(self, request: pb.ProduceRequest, response: pb.ProduceResponse) -> None:
        count = request.batch.count
        if response.error_code == 0 and not response.duplicate:
            self.stats.events += count
        elif response.error_code == 0 and self._stored_equal(request, response):
            self.stats.events += count
            self.stats.duplicates += count
        elif response.error_code in (0, FAILED_PRECONDITION) and _unknown_outcome(response):
            self._resend(request)
        else:
            raise _client.response_error(self.broker, response)

    def _stored_equal(self, request: pb.ProduceRequest, response: pb.ProduceResponse) -> bool:
        """Read the stored batch back and compare (rule 2)."""
        if response.count != request.batch.count:
            return False
        records = list(_client.read_records(
            self.broker, request.topic, request.partition, response.base_offset,
            response.base_offset + response.count, None, None, min(response.count, 10_000)))
        return (len(records) == 1 and records[0].base_offset == response.base_offset
                and not records[0].offsets and records[0].batch == request.batch)

    def _resend(self, request: pb.ProduceRequest) -> None:
        if self._fresh_id is None:
            self._fresh_id = _client.init_producer(self.stub, self.broker, request.topic)
        self.stats.resent += request.batch.count
        self._submit(request.topic, request.partition, request.batch, self._fresh_id)


def _unknown_outcome(response: pb.ProduceResponse) -> bool:
    """A duplicate that did not compare equal, or a sequence too old to compare."""
    if response.error_code == 0:
        return True
    return "older than" in response.error_message and "sequence" in response.error_message
