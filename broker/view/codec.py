"""Key and value byte layout of the compacted view. Pure: no I/O.

One column family, `view`, per broker; per partition (P = topic_id u32 |
partition u32, big-endian, as in the log):

    P | b"e" | source length u16 | source utf8 | key          -> entry
    P | b"s"                                                   -> state
    P | b"t" | publish_time_ms u64 | offset u64                -> entry key without P|b"e"

* An entry is the latest event of one (source, primary key). Keys sort by
  source (length, then bytes: the length prefix makes the source part
  prefix-free, so one source's keys are one contiguous range), then by key:
  an int key is b"\\x00" + its int64 with the sign bit flipped, big-endian
  (numeric order); a string key is b"\\x01" + UTF-8 (after every int).
* The state says the view holds every event of the log below `offset_next`
  (complete up to `scn`) and counts its keys, tombstones and bytes. It sorts
  after the entries, so one iterator reads a snapshot's entries and the state
  they belong to at one point. A pass is written in parts (store.py); while
  one is under way the state also holds `pass_end`: entries may already hold
  events from `offset_next` up to `pass_end`, and the counts are the pass's
  result. `offset_next` moves only when the last part is written.
* A follower whose log restarted past the view's position (its upstream's
  retention removed offsets before they were copied) cannot fold the view
  from its log: the state says so with `load_from` (the log's new start)
  until the upstream's view is loaded (load.py); no entries are served then.
* The tombstone index lists DELETE entries by publish time, so the sweep
  that drops tombstones older than delete_retention_ms reads only those.

An entry value is a 43-byte head, then the ordering key, the schema, the
serialized `keybus.v1.Headers` and the value:

    offset u64 | scn u64 | publish_time_ms i64 | event_time_ms i64 | slot u16 |
    opcode u8 | ordering_key length u16 | schema length u16 | headers length u32
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sdk.core.columns import TEXT_BYTES_MAX
from sdk.core.pb import keybus_pb2 as pb

PREFIX = struct.Struct(">II")
STATE = struct.Struct(">QQQQQ")  # offset_next, scn, keys, tombstones, bytes
PASS_END = struct.Struct(">Q")  # after STATE while a pass is written in parts
LOAD_FROM = struct.Struct(">Q")  # after PASS_END while the view waits to be loaded
GAP = struct.Struct(">Q")  # keys_missing_below, under GAP_TAG (absent: complete)
ENTRY_HEAD = struct.Struct(">QQqqHBHHI")
# The same head as a numpy record, to encode or decode many entries in one call.
HEAD_DTYPE = np.dtype([("offset", ">u8"), ("scn", ">u8"), ("publish_time_ms", ">i8"),
                       ("event_time_ms", ">i8"), ("slot", ">u2"), ("opcode", "u1"),
                       ("ordering_length", ">u2"), ("schema_length", ">u2"),
                       ("headers_length", ">u4")])
assert HEAD_DTYPE.itemsize == ENTRY_HEAD.size
TOMBSTONE_KEY = struct.Struct(">QQ")  # publish_time_ms, offset
SOURCE_LENGTH = struct.Struct(">H")
INT_KEY = struct.Struct(">Q")
OPCODE_AT = 34  # byte position of the opcode in an entry value
SIGN_BIT = 1 << 63
SOURCE_BYTES_MAX = TEXT_BYTES_MAX  # 2 length bytes: the rule producers are held to

ENTRY_TAG = b"e"
STATE_TAG = b"s"
TOMBSTONE_TAG = b"t"
GAP_TAG = b"g"
INT_TAG = b"\x00"
STRING_TAG = b"\x01"
AFTER_KEYS_TAG = b"\x02"  # sorts after every key of a source


class ViewCorrupt(Exception):
    """A stored view entry or state that does not decode: disk damage or a bug."""


def partition_prefix(topic_id: int, partition: int) -> bytes:
    return PREFIX.pack(topic_id, partition)


def state_key(topic_id: int, partition: int) -> bytes:
    return PREFIX.pack(topic_id, partition) + STATE_TAG


def gap_key(topic_id: int, partition: int) -> bytes:
    """Where a view that lacks keys says below which offset (store.ViewStore.gap)."""
    return PREFIX.pack(topic_id, partition) + GAP_TAG


def entries_prefix(topic_id: int, partition: int) -> bytes:
    return PREFIX.pack(topic_id, partition) + ENTRY_TAG


def tombstones_prefix(topic_id: int, partition: int) -> bytes:
    return PREFIX.pack(topic_id, partition) + TOMBSTONE_TAG


def source_part(source: str) -> bytes:
    """The (prefix-free) encoding of a source name inside an entry key."""
    data = source.encode()
    if len(data) > SOURCE_BYTES_MAX:
        raise ValueError(f"source of {len(data)} bytes is over {SOURCE_BYTES_MAX}")
    return SOURCE_LENGTH.pack(len(data)) + data


def key_part(key: int | str) -> bytes:
    """The order-preserving encoding of a primary key inside an entry key."""
    if isinstance(key, str):
        return STRING_TAG + key.encode()
    return INT_TAG + INT_KEY.pack((key + SIGN_BIT) & 0xFFFF_FFFF_FFFF_FFFF)


def split_entry_suffix(suffix: bytes) -> tuple[str, int | str]:
    """(source, key) of an entry key without its P|b"e" prefix."""
    (n,) = SOURCE_LENGTH.unpack_from(suffix)
    source = suffix[2:2 + n].decode()
    rest = suffix[2 + n:]
    tag = rest[:1]
    if tag == INT_TAG and len(rest) == 9:
        return source, INT_KEY.unpack_from(rest, 1)[0] - SIGN_BIT
    if tag == STRING_TAG:
        return source, rest[1:].decode()
    raise ViewCorrupt(f"view entry key suffix {suffix!r} does not decode")


def source_of_suffix(suffix: bytes) -> str:
    (n,) = SOURCE_LENGTH.unpack_from(suffix)
    return suffix[2:2 + n].decode()


@dataclass(frozen=True, slots=True)
class ViewState:
    """How far a partition's view goes and what it holds."""

    offset_next: int = 0  # every log event below this offset is folded in
    scn: int = 0  # the SCN of the last event folded in (0: none)
    keys: int = 0  # entries, tombstones included
    tombstones: int = 0
    entry_bytes: int = 0  # entry keys and values
    pass_end: int = 0  # a pass up to here is partly written (0: none); see the module doc
    load_from: int = 0  # > 0: waits for an upstream's view, the log starts here (load.py)

    def encode(self) -> bytes:
        """STATE, then PASS_END only while a pass is partly written or LOAD_FROM is
        set, then LOAD_FROM only when set (so a state written before either existed
        reads the same)."""
        head = STATE.pack(self.offset_next, self.scn, self.keys, self.tombstones,
                          self.entry_bytes)
        if self.load_from:
            return head + PASS_END.pack(self.pass_end) + LOAD_FROM.pack(self.load_from)
        return head + PASS_END.pack(self.pass_end) if self.pass_end else head

    @staticmethod
    def decode(value: bytes | None) -> ViewState:
        if value is None:
            return ViewState()
        if len(value) == STATE.size:
            return ViewState(*STATE.unpack(value))
        if len(value) == STATE.size + PASS_END.size:
            return ViewState(*STATE.unpack_from(value), *PASS_END.unpack_from(value, STATE.size))
        if len(value) == STATE.size + PASS_END.size + LOAD_FROM.size:
            return ViewState(*STATE.unpack_from(value), *PASS_END.unpack_from(value, STATE.size),
                             *LOAD_FROM.unpack_from(value, STATE.size + PASS_END.size))
        raise ViewCorrupt(f"view state of {len(value)} bytes; expected {STATE.size}, "
                          f"{STATE.size + PASS_END.size} or "
                          f"{STATE.size + PASS_END.size + LOAD_FROM.size}")


@dataclass(frozen=True, slots=True)
class Entry:
    """One decoded view entry (the snapshot and the tests use it)."""

    offset: int
    scn: int
    publish_time_ms: int
    event_time_ms: int
    slot: int
    opcode: int
    ordering_key: str
    schema: str
    headers: bytes  # serialized keybus.v1.Headers (b"" = none)
    value: bytes

    @property
    def is_tombstone(self) -> bool:
        return self.opcode == pb.DELETE


def encode_entry(offset: int, scn: int, publish_time_ms: int, event_time_ms: int, slot: int,
                 opcode: int, ordering_key: bytes, schema: bytes, headers: bytes,
                 value: bytes) -> bytes:
    head = ENTRY_HEAD.pack(offset, scn, publish_time_ms, event_time_ms, slot, opcode,
                           len(ordering_key), len(schema), len(headers))
    return b"".join((head, ordering_key, schema, headers, value))


def decode_entry(value: bytes) -> Entry:
    if len(value) < ENTRY_HEAD.size:
        raise ViewCorrupt(f"view entry of {len(value)} bytes is shorter than its head")
    (offset, scn, publish_time_ms, event_time_ms, slot, opcode, n_ordering, n_schema,
     n_headers) = ENTRY_HEAD.unpack_from(value)
    at = ENTRY_HEAD.size
    ordering = value[at:at + n_ordering]
    at += n_ordering
    schema = value[at:at + n_schema]
    at += n_schema
    headers = value[at:at + n_headers]
    at += n_headers
    if at > len(value):
        raise ViewCorrupt("view entry lengths run past its end")
    return Entry(offset, scn, publish_time_ms, event_time_ms, slot, opcode, ordering.decode(),
                 schema.decode(), headers, value[at:])


def entry_offset(value: bytes) -> int:
    """The log offset of an entry's event, without decoding the rest."""
    return int(INT_KEY.unpack_from(value)[0])


def entry_is_tombstone(value: bytes) -> bool:
    return value[OPCODE_AT] == pb.DELETE


def tombstone_key(topic_id: int, partition: int, publish_time_ms: int, offset: int) -> bytes:
    return tombstones_prefix(topic_id, partition) + TOMBSTONE_KEY.pack(
        max(publish_time_ms, 0), offset)


def decode_tombstone_key(key: bytes) -> tuple[int, int]:
    """(publish_time_ms, offset) of a tombstone index key."""
    publish_time_ms, offset = TOMBSTONE_KEY.unpack_from(key, PREFIX.size + 1)
    return int(publish_time_ms), int(offset)


def encode_heads(n: int, **columns: npt.ArrayLike) -> bytes:
    """The heads of n entries, concatenated (43 bytes each); `columns` are
    HEAD_DTYPE fields (arrays of n, or one value for all); absent ones are 0."""
    heads = np.zeros(n, HEAD_DTYPE)
    for name, column in columns.items():
        heads[name] = column
    return heads.tobytes()


def decode_heads(values: Sequence[bytes]) -> npt.NDArray[np.void]:
    """The heads of many entry values as one numpy record array."""
    size = ENTRY_HEAD.size
    if values and min(map(len, values)) < size:
        raise ViewCorrupt(f"a view entry is shorter than its {size}-byte head")
    return np.frombuffer(b"".join([v[:size] for v in values]), HEAD_DTYPE)
