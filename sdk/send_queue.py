"""What the producer's send task decides, without doing any I/O: the send queue.

`SendQueue` is pure (no asyncio, grpc or clock): which batch goes next, its
sequence and request id, what a response means, what to re-send after a
broken stream or a sequence gap, and what a delivery timeout fails. The shell
that moves the bytes is `sender.Sender`.

Idempotence rules (the broker stores a (producer_id, partition, sequence) once):
1. A batch gets its sequence when it is first written and keeps it for every
   re-send, so a retry after a broken stream stores nothing twice.
2. Per partition, batches go out in sequence order; after a sequence gap
   (FAILED_PRECONDITION naming "sequence") the partition is held until every
   request of it on the stream is answered, then re-sent in order.
3. A batch the broker refused for good (bad argument, SCN not increasing,
   missing topic) consumed no sequence: later batches of its partition move
   down by one.
4. A batch whose fate is unknown (written, unanswered) and past its deadline
   forces a new producer id: every such batch fails with DeliveryTimeout and
   the rest are numbered afresh, so nothing stale is deduplicated wrongly.
5. A caller-chosen producer id (high bit set, `check_producer_id`) starts at
   sequence 0 on every partition without InitProducer, so a second writer
   under the same id (a retried Spark task) re-sends the same
   (id, sequence) pairs and the broker answers them as duplicates. When rule
   4 or an unknown-id answer forces a new id, the new one comes from
   InitProducer: the chosen id's sequences are no longer known. A
   "duplicate" whose events differ from the stored ones (another producer, or
   a retried Spark task whose input changed, under the same id) fails alone
   with SequenceError kind "conflict" instead of being acknowledged; the
   numbering stands, as after "too_old" (that sequence is spent).
6. A duplicate's BatchResult carries the EventBatch that was sent
   (`sent_batch`), so a caller can compare it with the stored record; other
   results carry None (nothing is kept per batch on the common path).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol

from sdk import errors
from sdk.core.pb import keybus_pb2 as pb

PRODUCER_ID_CHOSEN_BIT = 1 << 63
PRODUCER_ID_MAX = (1 << 64) - 1
# A batch refused with a sequence gap this many times fails with SequenceError.
GAP_RETRIES_MAX = 5


@dataclass(frozen=True, slots=True)
class ProducedEvent:
    """Where one event was stored."""

    topic: str
    partition: int
    offset: int
    scn: int
    publish_time_ms: int


@dataclass(frozen=True, slots=True)
class BatchResult:
    """The broker's answer for one produce request (a batch or a window)."""

    topic: str
    partition: int
    base_offset: int
    count: int
    scn_first: int
    window: bool
    publish_time_ms: int
    duplicate: bool = False
    # Only when duplicate: the EventBatch this request carried (rule 6), to
    # compare with the record stored at base_offset. None otherwise.
    sent_batch: pb.EventBatch | None = None

    def event(self, index: int) -> ProducedEvent:
        """The ProducedEvent of the batch's event at position `index`."""
        scn = self.scn_first if self.window else self.scn_first + index
        return ProducedEvent(self.topic, self.partition, self.base_offset + index, scn,
                             self.publish_time_ms)


class Completion(Protocol):
    """Where a batch's fate goes: asyncio.Future or concurrent.futures.Future."""

    def done(self) -> bool: ...

    def set_result(self, result: BatchResult, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class ProducerBatch:
    """One produce request with its completion and retry state."""

    __slots__ = ("buffered", "count", "deadline_ms", "gaps", "partition", "request", "token")

    def __init__(self, request: pb.ProduceRequest, count: int, token: Completion,
                 deadline_ms: int, buffered: int) -> None:
        self.request = request
        self.partition = request.partition
        self.count = count
        self.token = token
        self.deadline_ms = deadline_ms
        self.buffered = buffered  # accumulator room to give back when done
        self.gaps = 0  # sequence-gap refusals so far

    @property
    def sequence(self) -> int:
        """The batch's sequence, -1 before its first write."""
        return self.request.sequence if self.request.request_id else -1


Outcome = tuple[ProducerBatch, "BatchResult | BaseException"]


class SendQueue:
    """Pure bookkeeping of unsent, in-flight and held batches (see module rules)."""

    def __init__(self, topic: str, partitions: int, idempotent: bool,
                 redirects: bool = False) -> None:
        self.topic = topic
        # Several brokers (sdk/cluster.py): "not the leader" means find the leader and re-send.
        self.redirects = redirects
        self.partitions = partitions
        self.idempotent = idempotent
        self.producer_id = 0
        self.next_sequences = [0] * partitions
        self.unsent: deque[ProducerBatch] = deque()
        self.in_flight: dict[int, ProducerBatch] = {}
        self._in_flight_by_partition = [0] * partitions
        self.held: dict[int, list[ProducerBatch]] = {}
        self._next_request_id = 1
        # A new producer id is needed before anything more is written.
        self.needs_reinit = False
        # The broker answered UNAVAILABLE: the shell should reconnect with backoff.
        self.reconnect_requested = False
        # What that answer said ("... cannot confirm that it still leads ..."), for the
        # shell's warning and the delivery timeout's last error; "" when none did.
        self.refusal = ""

    def reinit(self, producer_id: int, next_sequences: list[int]) -> None:
        """Adopt a producer id and its next sequence per partition."""
        assert not self.in_flight and all(b.sequence < 0 for b in self.pending())
        self.producer_id = producer_id
        self.next_sequences = list(next_sequences) + [0] * (self.partitions - len(next_sequences))
        self.needs_reinit = False

    def add(self, batch: ProducerBatch) -> None:
        """Queue a new batch behind the others of its partition."""
        held = self.held.get(batch.partition)
        if held is not None:
            held.append(batch)
        else:
            self.unsent.append(batch)

    def pending(self) -> list[ProducerBatch]:
        """Every batch not yet answered for good."""
        held = [b for batches in self.held.values() for b in batches]
        return [*self.in_flight.values(), *held, *self.unsent]

    def __len__(self) -> int:
        return len(self.in_flight) + len(self.unsent) + sum(map(len, self.held.values()))

    def busy_partitions(self, window: int = 1) -> set[int]:
        """Partitions with `window` or more requests outstanding (written and
        unanswered, or queued to be written), or held. The producer batches only
        for these (Nagle's rule; `ProducerConfig.nagle_window`)."""
        busy = set(self.held)
        outstanding = list(self._in_flight_by_partition)
        for batch in self.unsent:
            outstanding[batch.partition] += 1
        busy.update(p for p, n in enumerate(outstanding) if n >= window)
        return busy

    def next_to_write(self, in_flight_max: int) -> ProducerBatch | None:
        """Take the next batch to write, giving it a request id (and a
        sequence on its first write); None when nothing may go now."""
        if self.needs_reinit or len(self.in_flight) >= in_flight_max or not self.unsent:
            return None
        batch = self.unsent.popleft()
        request = batch.request
        if self.idempotent and batch.sequence < 0:
            request.producer_id = self.producer_id
            request.sequence = self.next_sequences[batch.partition]
            self.next_sequences[batch.partition] += 1
        request.request_id = self._next_request_id
        self._next_request_id += 1
        self.in_flight[request.request_id] = batch
        self._in_flight_by_partition[batch.partition] += 1
        return batch

    def process_response(self, response: pb.ProduceResponse) -> list[Outcome]:
        """Match a response to its batch; return the batches now finished."""
        batch = self.in_flight.pop(response.request_id, None)
        if batch is None:
            return []  # answers a request of an older numbering: superseded
        self._in_flight_by_partition[batch.partition] -= 1
        if not response.error_code:
            outcome: list[Outcome] = [(batch, _result_of(self.topic, batch, response))]
            return outcome + self._release_hold(batch.partition)
        if _retriable(response, self.redirects):
            # The broker cannot take it now: re-send after a reconnect and backoff.
            self._hold(batch.partition)
            self.held[batch.partition].append(batch)
            self.reconnect_requested = True
            self.refusal = response.error_message or f"error code {response.error_code}"
            return []
        error = _told_stale(errors.from_code(response.error_code, response.error_message),
                            self.partitions)
        if isinstance(error, errors.SequenceError) and self.idempotent:
            return self._process_sequence_error(batch, error)
        return [(batch, error), *self._refused(batch)]

    def _process_sequence_error(self, batch: ProducerBatch,
                                error: errors.SequenceError) -> list[Outcome]:
        kind = error.kind
        if kind == "gap":
            return self._process_gap(batch, error)
        outcome: list[Outcome] = [(batch, error)]
        if kind in ("too_old", "conflict"):  # the sequence is spent: numbering stands
            return outcome + self._release_hold(batch.partition)
        # The broker forgot this producer id: nothing numbered can be trusted.
        self.needs_reinit = True
        doomed = {b for b in self.pending() if b.sequence >= 0}
        return outcome + self._remove(doomed, error)

    def _process_gap(self, batch: ProducerBatch, error: errors.KeybusError) -> list[Outcome]:
        batch.gaps += 1
        if batch.gaps >= GAP_RETRIES_MAX:
            return [(batch, error), *self._refused(batch)]
        p = batch.partition
        self._hold(p)
        self.held[p].append(batch)
        return self._release_hold(p)

    def _refused(self, batch: ProducerBatch) -> list[Outcome]:
        """A batch the broker did not store: later sequences move down by one."""
        p = batch.partition
        if self.idempotent and batch.sequence >= 0:
            for other in self._batches_of(p):
                if other.sequence > batch.sequence:
                    other.request.sequence -= 1
            self.next_sequences[p] -= 1
        return self._release_hold(p)

    def _batches_of(self, p: int) -> list[ProducerBatch]:
        return [b for b in self.pending() if b.partition == p]

    def _hold(self, p: int) -> None:
        if p not in self.held:
            self.held[p] = [b for b in self.unsent if b.partition == p]
            self.unsent = deque(b for b in self.unsent if b.partition != p)

    def _release_hold(self, p: int) -> list[Outcome]:
        """Once a held partition has nothing on the stream, queue it in order."""
        if p in self.held and not self._in_flight_by_partition[p]:
            batches = sorted(self.held.pop(p), key=_by_sequence)
            self.unsent.extendleft(reversed(batches))
        return []

    def process_stream_broken(self) -> None:
        """Put every unanswered batch back in order for the next stream."""
        by_partition: dict[int, list[ProducerBatch]] = {}
        for batch in self.pending():
            by_partition.setdefault(batch.partition, []).append(batch)
        self.in_flight.clear()
        self._in_flight_by_partition = [0] * self.partitions
        self.held.clear()
        self.reconnect_requested = False
        self.refusal = ""
        self.unsent = deque(b for p in sorted(by_partition)
                            for b in sorted(by_partition[p], key=_by_sequence))

    def process_expiry(self, now_ms: int, error: BaseException) -> list[Outcome]:
        """Fail batches past their deadline (rule 4 when one may be stored)."""
        expired = [b for b in self.pending() if b.deadline_ms <= now_ms]
        if not expired:
            return []
        doomed = set(expired)
        if self.idempotent and any(b.sequence >= 0 for b in expired):
            doomed.update(b for b in self.pending() if b.sequence >= 0)
            self.needs_reinit = True
        return self._remove(doomed, error)

    def process_fail_all(self, error: BaseException) -> list[Outcome]:
        """Fail every pending batch (closed producer, permanent stream error)."""
        if self.idempotent and any(b.sequence >= 0 for b in self.pending()):
            self.needs_reinit = True
        return self._remove(set(self.pending()), error)

    def _remove(self, doomed: set[ProducerBatch], error: BaseException) -> list[Outcome]:
        for rid in [rid for rid, b in self.in_flight.items() if b in doomed]:
            batch = self.in_flight.pop(rid)
            self._in_flight_by_partition[batch.partition] -= 1
        for p in list(self.held):
            self.held[p] = [b for b in self.held[p] if b not in doomed]
            self._release_hold(p)
        self.unsent = deque(b for b in self.unsent if b not in doomed)
        if self.needs_reinit:
            for batch in self.pending():
                assert batch.sequence < 0 or batch in self.in_flight.values()
        return [(b, error) for b in doomed]


def _retriable(response: pb.ProduceResponse, redirects: bool = False) -> bool:
    """Per-request refusals that a later re-send can fix: the broker is
    shutting down or had a storage error, or a queue of it is full; with
    several brokers also "not the leader" (the re-send goes to the leader)."""
    code = response.error_code
    if redirects and code == errors.FAILED_PRECONDITION:
        return isinstance(errors.from_code(code, response.error_message), errors.NotLeader)
    return code == errors.UNAVAILABLE or (
        code == errors.RESOURCE_EXHAUSTED and "retry" in response.error_message.lower())


def _told_stale(error: errors.KeybusError, partitions: int) -> errors.KeybusError:
    """A partition the producer checked against the count it looked up is out of
    range on the broker only when the topic was deleted and created again with
    fewer partitions; say so and what to do, as the broker's words alone name a
    partition the user may never have chosen (the key's hash chose it)."""
    if isinstance(error, errors.InvalidArgument) and "is out of range for topic" in error.message:
        return errors.InvalidArgument(
            f"{error.message}: the topic has fewer partitions than the {partitions} this "
            "producer found when it was created (deleted and created again?); create a new "
            "producer", error.code)
    return error


def _by_sequence(batch: ProducerBatch) -> tuple[bool, int]:
    """Sort key: numbered batches by sequence, then unnumbered ones (stable)."""
    return (batch.sequence < 0, batch.sequence)


def _result_of(topic: str, batch: ProducerBatch, response: pb.ProduceResponse) -> BatchResult:
    if response.duplicate:  # rule 6
        return BatchResult(topic, batch.partition, response.base_offset,
                           response.count or batch.count, response.scn_first, response.window,
                           response.publish_time_ms, True, batch.request.batch)
    return BatchResult(topic, batch.partition, response.base_offset,
                       response.count or batch.count, response.scn_first, response.window,
                       response.publish_time_ms)


def check_producer_id(producer_id: object) -> int:
    """A caller-chosen producer id (rule 5), checked.

    Raises:
        ValueError: not an int, or the high bit (2^63) is not set, or above 2^64 - 1.
            Ids below 2^63 are the broker's (InitProducer) and must not be chosen.
    """
    if not isinstance(producer_id, int) or isinstance(producer_id, bool):
        raise ValueError(f"producer_id must be an int; got {producer_id!r}")
    if not PRODUCER_ID_CHOSEN_BIT <= producer_id <= PRODUCER_ID_MAX:
        raise ValueError(f"producer_id {producer_id} is invalid: a chosen id needs the high bit "
                         f"set, i.e. {PRODUCER_ID_CHOSEN_BIT} <= id <= {PRODUCER_ID_MAX} (ids "
                         "below 2^63 are handed out by the broker's InitProducer)")
    return producer_id
