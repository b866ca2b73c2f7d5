"""Is the upstream's log of a partition the one this follower copied? (Handshake, step 1b.)

`EpochEnd` compares leader epochs only. A static upstream (epoch 0 for ever)
whose topic was deleted and created again answers epoch 0 for another log,
and so does one whose data directory was replaced: the follower kept the old
log's offsets below the new log's end and copied the new one's after them, a
log that exists nowhere, and served it for good. So the handshake also
compares the last record it keeps with the upstream's record at the same
offset: base offset, SCN and publish time (what a copy keeps as it is and
compaction never rewrites). When they differ, the logs are two: the follower
drops its copy and copies the upstream's from its start (Kafka tells such
topics apart by topic id for the same reason).

`diverged` is the pure decision; `our_mark` (blocking, for a worker thread)
and `upstream_mark` read the two records.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import grpc
import grpc.aio

from broker.log import codec
from broker.log.rocks_store import RocksStore
from sdk import errors
from sdk.channel import stub_of
from sdk.core.pb import keybus_pb2 as pb


@dataclass(frozen=True, slots=True)
class RecordMark:
    """What tells a stored record apart from another log's at the same offset."""

    base_offset: int
    scn_first: int
    publish_time_ms: int


def diverged(ours: RecordMark, theirs: RecordMark | None) -> str | None:
    """Why the upstream's log is another one than ours, in words; None when the
    record agrees or the upstream cannot tell (it no longer holds the offset, or
    its compaction removed that record: its next one starts later)."""
    if theirs is None or theirs.base_offset > ours.base_offset or theirs == ours:
        return None
    return (f"its record holding offset {ours.base_offset} starts at {theirs.base_offset} with "
            f"scn {theirs.scn_first}, published at {theirs.publish_time_ms} ms; this copy's starts "
            f"at {ours.base_offset} with scn {ours.scn_first}, published at "
            f"{ours.publish_time_ms} ms")


def our_mark(store: RocksStore, topic_id: int, partition: int, offset: int) -> RecordMark | None:
    """The mark of the stored record holding `offset` (the last one before it when
    compaction removed it); None when there is none. Blocking."""
    with contextlib.closing(store.records_from(topic_id, partition, offset)) as found:
        for base, value in found:
            if base > offset:
                return None
            header = codec.decode_header(value)
            return RecordMark(base, header.scn_first, header.publish_time_ms)
    return None


async def upstream_mark(channel: grpc.aio.Channel, topic: str, partition: int,
                        offset: int, timeout_s: float = 10.0) -> RecordMark | None:
    """The mark of the upstream's first record at or after `offset` (a replica read,
    as the copy's); None when it holds none there (its retention removed it).

    Raises:
        errors.KeybusError: the upstream failed otherwise (the handshake is retried).
    """
    request = pb.ReadRequest(topic=topic, partition=partition, replica=True,
                             start=pb.StartPosition(offset=offset), stop_offset=offset + 1)
    call = stub_of(channel).Read(request, timeout=timeout_s)
    try:
        async for response in call:
            if response.records:
                record = response.records[0]
                return RecordMark(record.base_offset, record.scn_first, record.publish_time_ms)
    except grpc.RpcError as e:
        error = errors.from_rpc_error(e)
        if error.code == errors.OUT_OF_RANGE:
            return None
        raise error from None
    finally:
        call.cancel()
    return None
