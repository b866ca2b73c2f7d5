"""What a group commit stores and answers for one decided produce request. Pure.

The partition task decides a request (`broker/windows.py`: offsets, SCNs,
duplicates); these build the stored record (its log value, `codec.py`'s
header around the serialized `Record`) and the client's answer from that
decision, so the task's own code is only ordering and I/O.
"""

from __future__ import annotations

from broker.log import codec
from broker.log.rocks_store import Append
from broker.windows import Decision
from sdk.core.pb import keybus_pb2 as pb


def append_of(topic: str, index: int, leader_epoch: int, request: pb.ProduceRequest,
              decision: Decision) -> Append:
    """The record to append for a decided request (slots already verified or filled in)."""
    result = decision.result
    record = pb.Record(topic=topic, partition=index,
                       base_offset=result.base_offset, scn_first=result.scn_first,
                       window=result.window, publish_time_ms=result.publish_time_ms,
                       producer_id=request.producer_id, sequence=request.sequence,
                       leader_epoch=leader_epoch)
    record.batch.CopyFrom(request.batch)
    value = codec.encode_record(record.SerializeToString(), result.publish_time_ms,
                                result.count, result.scn_first, result.window)
    return Append(result.base_offset, result.scn_first, result.count, result.window, value)


def response_of(topic: str, index: int, request: pb.ProduceRequest,
                decision: Decision) -> pb.ProduceResponse:
    """The answer to a decided request (a duplicate gets its first answer's offsets)."""
    result = decision.result
    return pb.ProduceResponse(
        request_id=request.request_id, topic=topic, partition=index,
        base_offset=result.base_offset, count=result.count, scn_first=result.scn_first,
        window=result.window, publish_time_ms=result.publish_time_ms,
        duplicate=decision.duplicate)


def same_events(stored: pb.Record, sent: pb.EventBatch) -> bool | None:
    """Whether a stored record holds the events a request answered as its duplicate
    re-sends (count, keys, values); None when it cannot tell: compaction rewrote
    the record sparse. A retry re-sends the very request, so False means another
    writer numbered different events with the same producer id and sequence."""
    if stored.offsets:
        return None
    batch = stored.batch
    return (batch.count == sent.count and list(batch.key_ints) == list(sent.key_ints)
            and list(batch.key_strings) == list(sent.key_strings)
            and list(batch.values) == list(sent.values))
