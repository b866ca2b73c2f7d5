"""Key and value byte layout of the event processor stores. Pure: no I/O.

Two column families of the broker's one RocksDB database (integers
big-endian; a *group* is the length-prefixed namespace and consumer group, so
any strings are safe and a group's records are one contiguous range):

    ownership    topic_id u32 | group | partition u32
                 -> version u64 | epoch u64 | last_modified_ms i64 | owner utf-8
    checkpoints  topic_id u32 | b"c" | group | partition u32  -> offset u64 | scn u64 | epoch u64
                                                                 | bootstrap utf-8 (may be empty)
                 topic_id u32 | b"f" | group | partition u32  -> fence: epoch u64 | owner utf-8

    group = namespace length u16 | namespace utf-8 | consumer group length u16 | consumer group utf-8

Every key starts with the topic id, so deleting a topic's key range
(`RocksStore.delete_topic`) deletes its ownership and checkpoints too, and a
topic created again under the same name (a new id) starts clean. The etag
of an ownership record is its version as decimal text.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
OWNERSHIP_VALUE = struct.Struct(">QQq")  # version, epoch, last_modified_ms
CHECKPOINT_VALUE = struct.Struct(">QQQ")  # offset, scn, epoch
FENCE_VALUE = struct.Struct(">Q")  # epoch (then the owner id)
CHECKPOINT = b"c"
FENCE = b"f"


@dataclass(frozen=True, slots=True)
class Owned:
    """A stored ownership record."""

    owner_id: str
    version: int
    epoch: int
    last_modified_ms: int

    @property
    def etag(self) -> str:
        return str(self.version)


@dataclass(frozen=True, slots=True)
class Fence:
    """The highest ownership epoch registered for a partition, and its owner."""

    epoch: int
    owner_id: str


@dataclass(frozen=True, slots=True)
class Position:
    """A stored checkpoint."""

    offset: int
    scn: int
    epoch: int
    bootstrap: str = ""  # a Databus consumer's bootstrap position (JSON), "" online


def group_key(namespace: str, consumer_group: str) -> bytes:
    ns, group = namespace.encode(), consumer_group.encode()
    return U16.pack(len(ns)) + ns + U16.pack(len(group)) + group


def ownership_prefix(topic_id: int, namespace: str, consumer_group: str) -> bytes:
    return U32.pack(topic_id) + group_key(namespace, consumer_group)


def ownership_key(topic_id: int, namespace: str, consumer_group: str, partition: int) -> bytes:
    return ownership_prefix(topic_id, namespace, consumer_group) + U32.pack(partition)


def checkpoint_prefix(topic_id: int, namespace: str, consumer_group: str,
                      kind: bytes = CHECKPOINT) -> bytes:
    return U32.pack(topic_id) + kind + group_key(namespace, consumer_group)


def checkpoint_key(topic_id: int, namespace: str, consumer_group: str, partition: int,
                   kind: bytes = CHECKPOINT) -> bytes:
    return checkpoint_prefix(topic_id, namespace, consumer_group, kind) + U32.pack(partition)


def partition_of_key(key: bytes) -> int:
    """The partition of any key above (its last four bytes)."""
    return int(U32.unpack(key[-4:])[0])


def encode_owned(owned: Owned) -> bytes:
    return (OWNERSHIP_VALUE.pack(owned.version, owned.epoch, owned.last_modified_ms)
            + owned.owner_id.encode())


def decode_owned(value: bytes) -> Owned:
    version, epoch, last_modified_ms = OWNERSHIP_VALUE.unpack_from(value)
    return Owned(value[OWNERSHIP_VALUE.size:].decode(), int(version), int(epoch),
                 int(last_modified_ms))


def encode_position(position: Position) -> bytes:
    return (CHECKPOINT_VALUE.pack(position.offset, position.scn, position.epoch)
            + position.bootstrap.encode())


def decode_position(value: bytes) -> Position:
    offset, scn, epoch = CHECKPOINT_VALUE.unpack_from(value)
    return Position(int(offset), int(scn), int(epoch), value[CHECKPOINT_VALUE.size:].decode())


def encode_fence(fence: Fence) -> bytes:
    return FENCE_VALUE.pack(fence.epoch) + fence.owner_id.encode()


def decode_fence(value: bytes) -> Fence:
    (epoch,) = FENCE_VALUE.unpack_from(value)
    return Fence(int(epoch), value[FENCE_VALUE.size:].decode())
