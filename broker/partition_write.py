"""A produce group decided and written: the half of a commit that never waits.

Each request of the group is decided (offsets, SCN, the producer's sequence:
broker/windows.py), then the group's records go into RocksDB in one
WriteBatch without sync. What is left of the commit (the WAL fsync, then
making the group visible and answering it) is the partition's
(broker/partition.py), which runs this on its task or, when it has nothing
else to do, in the step of the `submit` call itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.errors import BrokerError
from broker.log import codec
from broker.log.rocks_store import Append
from broker.partition_commands import Produce
from broker.produce_records import append_of, same_events
from broker.supervision import mark_seen
from broker.windows import Decision, PartitionClock, ProduceInput, advance, decide
from sdk.core.pb import keybus_pb2 as pb

if TYPE_CHECKING:
    from broker.partition import Partition


@dataclass(slots=True)
class Written:
    """A group in RocksDB, not yet fsynced: its records and each request's outcome
    (a Decision, or the BrokerError that refused the request alone)."""

    appends: list[Append]
    outcomes: list[Decision | BrokerError]


def write_group(partition: Partition, commands: Sequence[Produce],
                publish_time_ms: int) -> Written | None:
    """Decide every request and write the group's records in one WriteBatch, each
    record stamped `publish_time_ms`.

    None when the write failed: nothing was written, the in-memory moves (clock,
    size, producer state) are undone and every request is answered with the error.
    Anything else a decision raises (a producer state that cannot be read) is the
    caller's, for supervision: the partition then reopens from the store.
    """
    saved_clock = PartitionClock(partition.clock.next_offset, partition.clock.last_scn)
    saved_producers: dict[int, list[codec.ProducerResult]] = {}
    saved_bytes = partition.bytes
    appends: list[Append] = []
    states: dict[int, bytes] = {}
    outcomes: list[Decision | BrokerError] = []
    for command in commands:
        try:
            outcome = _decide(partition, command.request, publish_time_ms, saved_producers)
        except BrokerError as e:
            outcomes.append(e)
            continue
        outcomes.append(outcome)
        if not outcome.duplicate:
            appends.append(append_of(partition.meta.name, partition.index,
                                     partition.leader_epoch, command.request, outcome))
            partition.bytes += len(appends[-1].value)
            advance(partition.clock, outcome.result)
            producer_id = command.request.producer_id
            if producer_id:
                partition.producers.commit(producer_id, outcome.result)
                states[producer_id] = partition.producers.encoded(producer_id)
    if appends:
        try:
            partition.store.append(partition.meta.topic_id, partition.index, appends, states,
                                   partition.start_offset, partition.bytes, sync=False)
        except Exception as e:  # nothing written: undo the in-memory moves, fail all
            partition.clock, partition.bytes = saved_clock, saved_bytes
            partition.producers.results.update(saved_producers)
            for command in commands:
                if not command.future.done():
                    command.future.set_exception(e)
                    command.future.add_done_callback(mark_seen)
            return None
    return Written(appends, outcomes)


def _decide(partition: Partition, request: pb.ProduceRequest, publish_time_ms: int,
            saved_producers: dict[int, list[codec.ProducerResult]]) -> Decision:
    producers = partition.producers
    producer_id = request.producer_id
    if producer_id and not producers.known(producer_id):
        stored = partition.store.load_producer(partition.meta.topic_id, partition.index,
                                               producer_id)
        if stored is not None:
            producers.load(producer_id, codec.decode_producer_results(stored))
    if producer_id and producer_id not in saved_producers:
        saved_producers[producer_id] = list(producers.results.get(producer_id, []))
    request_input = ProduceInput(partition.meta.name, partition.index, request.batch.count,
                                 request.window, request.scn, producer_id, request.sequence)
    decision = decide(request_input, partition.clock, producers, publish_time_ms)
    if decision.duplicate:
        _check_duplicate(partition, request, decision.result)
    return decision


def _check_duplicate(partition: Partition, request: pb.ProduceRequest,
                     result: codec.ProducerResult) -> None:
    """Refuse a "duplicate" whose events differ from what its (id, sequence) stored.

    Answering it as stored would acknowledge events that are nowhere (two
    producers under one chosen id, each numbering from 0). Only duplicates pay
    for the read, and a record not readable by itself (trimmed, or still in this
    group's WriteBatch) is taken as the retry it almost always is.
    """
    same: bool | None = False
    if result.count == request.batch.count:
        stored = _record_at(partition, result.base_offset)
        same = None if stored is None else same_events(stored, request.batch)
    if same is False:
        raise BrokerError("producer_id_conflict", sequence=request.sequence,
                          producer_id=request.producer_id, topic=partition.meta.name,
                          partition=partition.index, offset=result.base_offset)


def _record_at(partition: Partition, base_offset: int) -> pb.Record | None:
    """The stored record starting at `base_offset`, None when there is none. The
    scan is closed at once: only its first record is wanted, and a scan left
    suspended keeps its RocksDB iterator (and what it pins) until collected."""
    with contextlib.closing(partition.store.records_from(
            partition.meta.topic_id, partition.index, base_offset)) as records:
        first = next(records, None)
    if first is None or first[0] != base_offset:
        return None
    return pb.Record.FromString(codec.record_bytes(first[1]))
