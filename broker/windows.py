"""SCN assignment and producer idempotence for one partition. Pure.

Rules:
1. Idempotence first. A producer (id != 0) numbers its batches per partition
   from 0. The next sequence is appended; a sequence already stored is a
   duplicate and gets its original result back (stores nothing); a gap is
   refused, so a lost batch is never silently skipped. Results of the last
   `results_kept` sequences are kept to answer retries of a pipeline.
2. SCN. A supplied SCN (non-zero) makes the batch a window and must exceed
   the partition's last SCN, else the batch is refused: a re-sent window
   stores nothing. Without one, a window gets last_scn + 1 and a plain batch
   gets last_scn + 1 .. last_scn + count (one SCN per event).
3. Offsets are dense: base_offset = the partition's next offset.

`ProducerTable` holds the state; `decide` returns what to do without changing
it, and `commit` applies it only once the write is durable, so a failed write
leaves nothing behind.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from broker.errors import BrokerError
from broker.log.codec import PRODUCER_RESULT, ProducerResult, encode_producer_results
from sdk.core.columns import SCN_MAX


@dataclass(frozen=True, slots=True)
class ProduceInput:
    """The parts of a ProduceRequest the decision needs."""

    topic: str
    partition: int
    count: int
    window: bool
    scn: int
    producer_id: int
    sequence: int


@dataclass(frozen=True, slots=True)
class Decision:
    result: ProducerResult
    duplicate: bool


@dataclass(slots=True)
class PartitionClock:
    """Where the partition's offsets and SCNs stand (in memory, per partition)."""

    next_offset: int
    last_scn: int


@dataclass(slots=True)
class ProducerTable:
    """Recent results per producer id on one partition, in memory.

    At most `producer_ids_max` ids stay in memory (least recently used go
    first); an evicted id's state is still in RocksDB and is loaded again on
    its next request, so eviction never breaks idempotence.
    """

    results_kept: int
    producer_ids_max: int = 100_000
    results: OrderedDict[int, list[ProducerResult]] = field(default_factory=OrderedDict)
    # id -> (the last result encoded, the stored form then): `encoded` packs only what a
    # commit added instead of every kept result (64 struct packs per commit otherwise).
    _encoded: dict[int, tuple[ProducerResult, bytes]] = field(default_factory=dict)

    def known(self, producer_id: int) -> bool:
        if producer_id in self.results:
            self.results.move_to_end(producer_id)
            return True
        return False

    def load(self, producer_id: int, results: list[ProducerResult]) -> None:
        self.results[producer_id] = results[-self.results_kept:]
        self._evict()

    def commit(self, producer_id: int, result: ProducerResult) -> list[ProducerResult]:
        kept = self.results.setdefault(producer_id, [])
        kept.append(result)
        del kept[: -self.results_kept]
        self._evict()
        return kept

    def encoded(self, producer_id: int) -> bytes:
        """The kept results of `producer_id` in their stored form (encode_producer_results).

        When one result was added since the last call (a commit), the last bytes plus
        that result, cut to what is kept; otherwise (loaded, rolled back, or several
        added) encoded in full. Results are never changed in place, so a list whose
        second-to-last result is the one last encoded holds what was encoded then,
        less what the cut dropped, plus one."""
        kept = self.results.get(producer_id, [])
        if not kept:
            self._encoded.pop(producer_id, None)
            return b""
        last = self._encoded.get(producer_id)
        if last is not None and last[0] is kept[-1]:
            data = last[1]
        elif last is not None and len(kept) >= 2 and last[0] is kept[-2]:
            data = (last[1] + encode_producer_results(kept[-1:]))[-len(kept) * PRODUCER_RESULT.size:]
        else:
            data = encode_producer_results(kept)
        self._encoded[producer_id] = (kept[-1], data)
        return data

    def forget(self, producer_ids: list[int]) -> None:
        for producer_id in producer_ids:
            self.results.pop(producer_id, None)
            self._encoded.pop(producer_id, None)

    def _evict(self) -> None:
        while len(self.results) > self.producer_ids_max:
            producer_id, _ = self.results.popitem(last=False)
            self._encoded.pop(producer_id, None)


def decide(request: ProduceInput, clock: PartitionClock, producers: ProducerTable,
           publish_time_ms: int) -> Decision:
    """Decide a produce request against the current state (rules 1-3)."""
    if request.producer_id:
        duplicate = _check_sequence(request, producers)
        if duplicate is not None:
            return Decision(duplicate, True)
    window = request.window or request.scn != 0
    if request.scn:
        if request.scn <= clock.last_scn:
            raise BrokerError("scn_not_increasing", scn=request.scn, last_scn=clock.last_scn,
                              topic=request.topic, partition=request.partition)
        scn_first = request.scn
    else:
        scn_first = clock.last_scn + 1
    if (scn_first if window else scn_first + request.count - 1) > SCN_MAX:  # the wire's uint64
        raise BrokerError("scns_exhausted", topic=request.topic, partition=request.partition,
                          count=request.count, last_scn=clock.last_scn, max=SCN_MAX)
    result = ProducerResult(request.sequence, clock.next_offset, request.count, scn_first,
                            window, publish_time_ms)
    return Decision(result, False)


def advance(clock: PartitionClock, result: ProducerResult) -> None:
    """Move the partition clock past an appended result."""
    clock.next_offset = result.base_offset + result.count
    clock.last_scn = result.scn_first if result.window else result.scn_first + result.count - 1


def _check_sequence(request: ProduceInput, producers: ProducerTable) -> ProducerResult | None:
    """Return the stored result for a retried sequence, None for the next one."""
    kept = producers.results.get(request.producer_id)
    if not kept:
        if request.sequence != 0:
            raise BrokerError("producer_unknown", producer_id=request.producer_id,
                              topic=request.topic, partition=request.partition,
                              sequence=request.sequence)
        return None
    last = kept[-1].sequence
    if request.sequence == last + 1:
        return None
    if request.sequence > last + 1:
        raise BrokerError("sequence_gap", sequence=request.sequence,
                          producer_id=request.producer_id, topic=request.topic,
                          partition=request.partition, expected=last + 1)
    for result in kept:
        if result.sequence == request.sequence:
            return result
    raise BrokerError("sequence_too_old", sequence=request.sequence,
                      producer_id=request.producer_id, topic=request.topic,
                      partition=request.partition, kept=producers.results_kept)
