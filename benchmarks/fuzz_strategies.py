"""Hypothesis strategies for every request message of proto/keybus.proto.

Built from the message descriptors, so a field added to the contract is
fuzzed without a change here. Each field draws boundary values (0, 1, -1,
the type's extremes), small random ones, and for names (topic,
subscription, ...) a small pool that hits existing objects often enough to
reach the code behind the lookups. A request is sent as one of: the
serialized message, the serialized message damaged (a byte flipped,
truncated, or an unknown field appended), or raw bytes.
"""

from __future__ import annotations

import functools
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

from sdk.core.pb import keybus_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["Keybus"]
# Names the fuzz run creates and uses; PROTECTED holds data checked after the run.
PROTECTED_TOPIC = "fuzz-keep"
TOPICS = ("fuzz-a", "fuzz-b", PROTECTED_TOPIC, "", "no-such-topic", "bad name!", "fuzz.*")
SUBSCRIPTIONS = ("s1", "s2", "", "bad name!")
NAME_FIELDS = {"topic": TOPICS, "dead_letter_topic": TOPICS, "subscription": SUBSCRIPTIONS,
               "consumer_name": ("c1", "c2", ""), "principal": ("alice", "root", "", "a\x00b")}
LIST_FIELDS = {"range_partitions", "mod_buckets"}
LIST_SAMPLES = ("[0]", "[1,3-6]", "[0-65536]", "[]", "[5-1]", "[-1]", "x", "[0,0]")
MAX_DEPTH = 4

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1), FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1), FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1), FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1), FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1), FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def _integers(low: int, high: int) -> st.SearchStrategy[int]:
    edges = sorted({v for v in (0, 1, 2, -1, 65535, 65536, 2**31 - 1, 2**32 - 1, 2**63,
                                low, high) if low <= v <= high})
    return st.one_of(st.sampled_from(edges), st.integers(0, min(high, 100)),
                     st.integers(low, high))


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _INT_RANGES:
        return _integers(*_INT_RANGES[kind])
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, width=32 if kind == FieldDescriptor.TYPE_FLOAT else 64)
    if kind == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]),
                         st.integers(-3, 99))
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    if field.name in NAME_FIELDS:
        return st.one_of(st.sampled_from(NAME_FIELDS[field.name]), st.text(max_size=12))
    if field.name in LIST_FIELDS:
        return st.one_of(st.sampled_from(LIST_SAMPLES), st.text(max_size=12))
    return st.text(max_size=16)


def _field(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key = _scalar(field.message_type.fields_by_name["key"])
        value = _scalar(field.message_type.fields_by_name["value"])
        return st.dictionaries(key, value, max_size=3)
    if field.message_type is not None:
        one: st.SearchStrategy[Any] = messages(field.message_type, depth + 1)
    else:
        one = _scalar(field)
    if field.is_repeated:
        return st.lists(one, max_size=5)
    return one


@functools.cache
def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Messages of this type with any subset of their fields set (one strategy
    per type and depth, built once: hypothesis draws fastest from a fixed tree)."""
    cls = message_class(descriptor)
    if depth >= MAX_DEPTH:
        return st.just(cls())
    fields: dict[str, st.SearchStrategy[Any]] = {
        f.name: st.deferred(lambda f=f: _field(f, depth))  # type: ignore[misc]
        for f in descriptor.fields}
    return st.fixed_dictionaries({}, optional=fields).map(lambda values: _build(cls, values))


def message_class(descriptor: Descriptor) -> type[Message]:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(descriptor)


def _build(cls: type[Message], values: dict[str, Any]) -> Message:
    message = cls()
    for name, value in values.items():
        field = cls.DESCRIPTOR.fields_by_name[name]
        target = getattr(message, name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for key, item in value.items():
                if field.message_type.fields_by_name["value"].message_type is not None:
                    target[key].CopyFrom(item)
                else:
                    target[key] = item
        elif field.is_repeated:
            target.extend(value)
        elif field.message_type is not None:
            target.CopyFrom(value)
        else:
            setattr(message, name, value)
    return message


def damaged(data: bytes) -> st.SearchStrategy[bytes]:
    """The bytes of a message with one kind of damage."""
    flips = st.tuples(st.integers(0, max(len(data) - 1, 0)), st.integers(1, 255)).map(
        lambda p: data[:p[0]] + bytes([data[p[0]] ^ p[1]]) + data[p[0] + 1:] if data else b"\x01")
    cuts = st.integers(0, max(len(data) - 1, 0)).map(lambda n: data[:n])
    unknown = st.sampled_from([b"\xf8\x07\x01", b"\xa2\x06\x00", b"\x0f"]).map(lambda x: data + x)
    return st.one_of(flips, cuts, unknown)


@functools.cache
def payloads(method: str) -> st.SearchStrategy[bytes]:
    """What one request of `method` may look like on the wire."""
    descriptor = SERVICE.methods_by_name[method].input_type
    valid = messages(descriptor).map(lambda m: m.SerializeToString(deterministic=True))
    return st.one_of(valid, valid.flatmap(damaged), st.binary(max_size=128))
