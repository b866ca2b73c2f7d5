"""Key and value byte layout of the RocksDB log. Pure: no I/O.

Column families and keys (all integers big-endian, so byte order is
numeric order and a seek is a range scan):

    log        topic_id u32 | partition u32 | base_offset u64  -> record value
    scn_index  topic_id u32 | partition u32 | scn_first u64    -> base_offset u64 | count u32 | window u8
    producers  topic_id u32 | partition u32 | producer_id u64  -> producer results
    partitions topic_id u32 | partition u32                    -> start_offset u64 | bytes u64
    meta       b"topic/" + name                                -> topic JSON
               b"next_topic_id", b"next_producer_id"           -> u64
    cursors    topic_id u32 | b"s" | name                      -> subscription JSON
               topic_id u32 | b"c" | partition u32 | name      -> cursor (subscription/cursor.py)
    acls       permission u8 | principal | 0x00 | topic pattern -> b"" (security/acl_store.py)

A record value is a 25-byte header then the serialized `keybus.v1.Record`:

    crc32 u32 (of the record bytes) | publish_time_ms i64 | count u32 | scn_first u64 | flags u8

flags: bit 0 window; bit 1 sparse, a record a compacted topic rewrote
(broker/view/compaction.py): it still spans `count` offsets from its key,
but holds only the events listed in its `offsets` column.

The header lets retention and recovery work without parsing protobuf; the
record bytes go to readers unchanged (a Read response is their
concatenation). One record is one produce call: a batch or a window.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

PREFIX = struct.Struct(">II")
LOG_KEY = struct.Struct(">IIQ")
U64 = struct.Struct(">Q")
U32 = struct.Struct(">I")
HEADER = struct.Struct(">IqIQB")
SCN_ENTRY = struct.Struct(">QI?")  # base_offset, count, window
PARTITION_STATE = struct.Struct(">QQ")
PRODUCER_RESULT = struct.Struct(">QQIQ?q")  # sequence, base_offset, count, scn_first, window, publish_time_ms
OFFSET_MAX = (1 << 64) - 1


class CorruptRecord(Exception):
    """A stored record whose checksum or header does not match: disk damage."""


def prefix(topic_id: int, partition: int) -> bytes:
    return PREFIX.pack(topic_id, partition)


def log_key(topic_id: int, partition: int, offset: int) -> bytes:
    return LOG_KEY.pack(topic_id, partition, offset)


def subscription_key(topic_id: int, name: str) -> bytes:
    return U32.pack(topic_id) + b"s" + name.encode()


def cursor_key(topic_id: int, partition: int, name: str) -> bytes:
    return U32.pack(topic_id) + b"c" + U32.pack(partition) + name.encode()


def offset_of_key(key: bytes) -> int:
    return int(LOG_KEY.unpack(key)[2])


@dataclass(frozen=True, slots=True)
class RecordHeader:
    crc32: int
    publish_time_ms: int
    count: int
    scn_first: int
    window: bool
    sparse: bool = False

    @property
    def scn_last(self) -> int:
        return self.scn_first if self.window else self.scn_first + self.count - 1


def encode_record(record_bytes: bytes, publish_time_ms: int, count: int, scn_first: int,
                  window: bool, sparse: bool = False) -> bytes:
    header = HEADER.pack(zlib.crc32(record_bytes), publish_time_ms, count, scn_first,
                         window | sparse << 1)
    return header + record_bytes


def decode_header(value: bytes) -> RecordHeader:
    if len(value) < HEADER.size:
        raise CorruptRecord(f"record value of {len(value)} bytes is shorter than its header")
    crc, publish_time_ms, count, scn_first, flags = HEADER.unpack_from(value)
    return RecordHeader(crc, publish_time_ms, count, scn_first, bool(flags & 1), bool(flags & 2))


def record_bytes(value: bytes, verify: bool = True) -> bytes:
    """The serialized Record inside a stored value; checks the CRC when asked."""
    body = value[HEADER.size:]
    if verify:
        (crc,) = struct.unpack_from(">I", value)
        if zlib.crc32(body) != crc:
            raise CorruptRecord("record checksum mismatch")
    return body


@dataclass(frozen=True, slots=True)
class ProducerResult:
    """What a producer's batch got; kept so a retry is answered the same way."""

    sequence: int
    base_offset: int
    count: int
    scn_first: int
    window: bool
    publish_time_ms: int


def encode_producer_results(results: list[ProducerResult]) -> bytes:
    return b"".join(
        PRODUCER_RESULT.pack(r.sequence, r.base_offset, r.count, r.scn_first, r.window,
                             r.publish_time_ms)
        for r in results
    )


def decode_producer_results(value: bytes) -> list[ProducerResult]:
    size = PRODUCER_RESULT.size
    if len(value) % size:
        raise CorruptRecord(f"producer state of {len(value)} bytes is not a multiple of {size}")
    return [ProducerResult(*PRODUCER_RESULT.unpack_from(value, i)) for i in range(0, len(value), size)]
