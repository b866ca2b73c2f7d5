"""Sends one Spark write task's batches through the SDK producer, so that a
retried task stores nothing twice.

Rules:
1. A task's producer id is derived from what stays the same when Spark runs
   the task again: the write (a batch write's id, or a streaming query's id
   and micro-batch id) and the task's partition (`task_producer_id`). It is
   given to `sdk.producer.Producer.create(producer_id=...)`, one producer
   per target topic, so each (topic, partition) gets sequences 0, 1, 2, ...
   in the order the task sends batches. A retried attempt therefore re-sends
   the same (producer id, sequence) pairs, and the broker answers those it
   has stored with `duplicate` and the original offsets instead of storing them.
2. A duplicate is trusted only after reading the stored batch back and
   finding it equal to the one sent (`BatchResult.sent_batch`). If it differs
   (the task's input changed between attempts: nondeterministic upstream,
   such as the row order after a shuffle) or the broker no longer keeps that
   sequence's result (more than 64 batches ago: SequenceError "too_old"),
   or the broker finds it differs itself (SequenceError "conflict"),
   the batch is sent again through a second producer with a fresh id from
   InitProducer: a possible duplicate, never a loss.
3. Any other refusal, or a delivery timeout, fails the task; Spark retries
   it and rule 1 makes the retry safe.
4. Each batch the task hands over becomes exactly one produce request as long
   as it stays under the producer's batch_bytes_max, so sequences follow the
   task's batches; a larger batch is split the same way by every attempt.
5. A broker that cannot be reached when a topic's producer opens (it is
   restarting) is asked again for up to `OPEN_UNREACHABLE_WAIT_S`, as Kafka's
   producer blocks up to max.block.ms for its metadata; once open, the SDK
   producer reconnects by itself. The driver checked the broker when the
   write was planned (writer.py), so a wrong address fails there at once.

Runs inside a Spark task (a plain thread): the SDK's async producers run on
a loop thread this object owns; the task's thread only hands columns over
and waits for answers.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass
from typing import Any

from sdk import errors
from sdk.loop_thread import LoopThread
from sdk.producer import BatchFuture, Producer, ProducerConfig
from sdk.security import ClientSecurity
from sdk.sender import PRODUCER_ID_CHOSEN_BIT, BatchResult
from spark_connector import _client

# Requests are cut at this size as well as at writeBatchEvents (the broker
# takes up to 32 MiB per request).
BATCH_BYTES_MAX = 16 << 20
OPEN_UNREACHABLE_WAIT_S = 60.0  # rule 5


def task_producer_id(write_id: str, task_partition: int) -> int:
    """A producer id that is the same for every attempt of one write task (rule 1)."""
    digest = hashlib.blake2b(f"keybus-spark:{write_id}:{task_partition}".encode(),
                             digest_size=8).digest()
    return int.from_bytes(digest, "big") | PRODUCER_ID_CHOSEN_BIT


@dataclass
class EventColumns:
    """One batch of events for one topic partition, as columns (input order).

    The optional columns are per event; None = the field's default for all.
    """

    keys: list[int | str]
    values: list[bytes]
    ordering_keys: list[str] | None = None
    sources: list[str] | None = None
    opcodes: list[int] | None = None
    headers: list[dict[str, bytes]] | None = None
    event_times_ms: list[int] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def take(self, indexes: list[int]) -> EventColumns:
        """The events at `indexes`, in that order."""
        if len(indexes) == len(self.keys):
            return self

        def pick(column: list[Any] | None) -> list[Any] | None:
            return None if column is None else [column[i] for i in indexes]

        return EventColumns(pick(self.keys) or [], pick(self.values) or [],
                            pick(self.ordering_keys), pick(self.sources), pick(self.opcodes),
                            pick(self.headers), pick(self.event_times_ms))

    def send_options(self) -> dict[str, Any]:
        """Producer.send_batch keywords for the optional columns."""
        given = {"ordering_keys": self.ordering_keys, "sources": self.sources,
                 "opcodes": self.opcodes, "headers_per_event": self.headers,
                 "event_times_ms": self.event_times_ms}
        return {name: column for name, column in given.items() if column is not None}


@dataclass
class WriteStats:
    """What one task sent, for its commit message."""

    events: int = 0
    batches: int = 0
    duplicates: int = 0  # events the broker already had from an earlier attempt
    resent: int = 0  # events sent again under a fresh id (rule 2)


@dataclass
class _Sent:
    """A batch handed to a producer, kept until its answers are checked."""

    topic: str
    partition: int
    columns: EventColumns
    future: BatchFuture
    resend: bool  # sent under the fresh id (rule 2): its answers need no check


class TaskProducer:
    """Pipelined, deduplicated sends of one task (see module rules).

    Args:
        broker: "host:port".
        producer_id: the task's id (rule 1); None = a fresh id per attempt.
        in_flight_max: produce requests unanswered per topic.
        batch_events_max: the most events a caller puts in one batch.
        security: TLS and credentials (None: plain text).
    """

    def __init__(self, broker: str, producer_id: int | None, in_flight_max: int,
                 batch_events_max: int = 5000, security: ClientSecurity | None = None) -> None:
        self.broker = broker
        self.security = security
        self.in_flight_max = in_flight_max
        self.stats = WriteStats()
        self._producer_id = producer_id
        self._config = ProducerConfig(
            batch_events_max=batch_events_max, batch_bytes_max=BATCH_BYTES_MAX,
            buffer_events_max=batch_events_max * (in_flight_max + 1),
            in_flight_max=in_flight_max, linger_ms=0)
        self._loop = LoopThread("keybus-spark-write")
        self._producers: dict[str, Producer] = {}  # rule 1: under the task's id
        self._fresh: dict[str, Producer] = {}  # rule 2: under an InitProducer id
        self._sent: deque[_Sent] = deque()
        self.open_unreachable_wait_s = OPEN_UNREACHABLE_WAIT_S

    def partitions(self, topic: str) -> int:
        """The topic's partition count (opens the topic's producer).

        Raises:
            BrokerCallError: the topic does not exist, or the broker cannot be reached.
        """
        return self._producer(topic, self._producers, self._producer_id).partitions

    def send(self, topic: str, partition: int, columns: EventColumns) -> None:
        """Hand one batch over; waits for answers only when the pipeline is full.

        Raises:
            BrokerCallError: an earlier batch was refused (rule 3).
        """
        self._send(topic, partition, columns, resend=False)
        self.stats.batches += 1

    def finish(self) -> WriteStats:
        """Wait until every batch is answered (and re-sent where rule 2 says),
        then close the producers.

        Raises:
            BrokerCallError: a batch was refused, timed out, or the broker went away.
        """
        try:
            while self._sent:
                self._check(self._sent.popleft())
        finally:
            self.abort()
        return self.stats

    def abort(self) -> None:
        """Close the producers without waiting for answers, stop the loop. Idempotent."""
        producers = [*self._producers.values(), *self._fresh.values()]
        self._producers.clear()
        self._fresh.clear()
        try:
            for producer in producers:
                self._loop.run(producer.close(timeout_ms=0))
        finally:
            self._loop.stop()

    def _producer(self, topic: str, producers: dict[str, Producer],
                  producer_id: int | None) -> Producer:
        producer = producers.get(topic)
        if producer is None:
            producer = producers[topic] = self._open(topic, producer_id)
        return producer

    def _open(self, topic: str, producer_id: int | None) -> Producer:
        """A producer of `topic`; rule 5 while the broker cannot be reached."""
        def create() -> Producer:
            try:
                return self._loop.run(Producer.create(
                    self.broker, topic, config=self._config, producer_id=producer_id,
                    security=self.security))
            except errors.KeybusError as e:
                raise _client.call_failure(f"Produce to {topic!r}", self.broker, e) from None
        return _client.retry_while_unreachable(create, self.open_unreachable_wait_s,
                                               "a write task")

    def _send(self, topic: str, partition: int, columns: EventColumns, resend: bool) -> None:
        while len(self._sent) > self.in_flight_max:
            self._check(self._sent.popleft())
        producer = (self._producer(topic, self._fresh, None) if resend
                    else self._producer(topic, self._producers, self._producer_id))
        future = self._loop.run(producer.send_batch(
            columns.keys, columns.values, partition=partition, **columns.send_options()))
        self._sent.append(_Sent(topic, partition, columns, future, resend))

    def _check(self, sent: _Sent) -> None:
        """Account for one batch's answers; re-send what rule 2 says."""
        for indexes, outcome in self._loop.run(sent.future.wait_results()):
            if isinstance(outcome, BatchResult):
                if sent.resend or not outcome.duplicate:
                    self.stats.events += len(indexes)
                elif self._stored_equal(outcome):
                    self.stats.events += len(indexes)
                    self.stats.duplicates += len(indexes)
                else:
                    self._resend(sent, indexes)
            elif (isinstance(outcome, errors.SequenceError)
                  and outcome.kind in ("too_old", "conflict") and not sent.resend):
                self._resend(sent, indexes)
            elif isinstance(outcome, errors.KeybusError):
                raise _client.call_failure(f"Produce to {sent.topic!r}/{sent.partition}",
                                           self.broker, outcome)
            else:
                raise outcome

    def _resend(self, sent: _Sent, indexes: list[int]) -> None:
        self.stats.resent += len(indexes)
        self._send(sent.topic, sent.partition, sent.columns.take(indexes), resend=True)

    def _stored_equal(self, result: BatchResult) -> bool:
        """Read the stored batch back and compare (rule 2)."""
        sent = result.sent_batch
        if sent is None or result.count != sent.count:
            return False
        records = list(_client.read_records(
            self.broker, result.topic, result.partition, result.base_offset,
            result.base_offset + result.count, None, None, min(result.count, 10_000)))
        return (len(records) == 1 and records[0].base_offset == result.base_offset
                and not records[0].offsets and records[0].batch == sent)
