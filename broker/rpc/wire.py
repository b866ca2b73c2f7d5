"""Hand-built ReadResponse bytes: records go out as stored, never re-parsed.

A repeated message field on the wire is tag + length + bytes per element,
so a response is the concatenation of the stored record bytes with their
tags. Field numbers must match `ReadResponse` in proto/keybus.proto; a unit
test parses the output with the generated class to keep them in step.
"""

from __future__ import annotations

from broker.read_path import INCARNATION_FIELD_BYTES_MAX

RECORDS_TAG = b"\x0a"  # field 1, length-delimited
NEXT_OFFSET_TAG = b"\x10"  # field 2, varint
END_OFFSET_TAG = b"\x18"  # field 3, varint
HIGH_WATERMARK_TAG = b"\x20"  # field 4, varint
PASSED_SCN_TAG = b"\x28"  # field 5, varint
PASSED_OFFSET_TAG = b"\x30"  # field 6, varint
INCARNATION_TAG = b"\x3a"  # field 7, length-delimited


_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


def varint(value: int) -> bytes:
    """`value` (>= 0) as a protobuf varint; one and two bytes (lengths, counts, small
    offsets: most calls, several per Delivery) without the loop."""
    if value < 0x80:
        return _ONE_BYTE[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_response(records: list[bytes], next_offset: int, end_offset: int,
                  high_watermark: int = 0) -> bytes:
    parts: list[bytes] = []
    for record in records:
        parts += (RECORDS_TAG, varint(len(record)), record)
    if next_offset:
        parts += (NEXT_OFFSET_TAG, varint(next_offset))
    if end_offset:
        parts += (END_OFFSET_TAG, varint(end_offset))
    if high_watermark:
        parts += (HIGH_WATERMARK_TAG, varint(high_watermark))
    return b"".join(parts)


def passed_response(next_offset: int, end_offset: int, passed_scn: int,
                    passed_offset: int) -> bytes:
    """A filtered follow read's position past records its filter dropped whole
    (no records; see `ReadResponse.passed_scn`). Kept apart from `read_response`,
    whose every call carries records or the tail position, so that hot path is as it was."""
    assert passed_scn > 0, "an SCN is at least 1; 0 means 'not said' on the wire"
    assert next_offset > passed_offset, "the read resumes after what it passed"
    return b"".join((NEXT_OFFSET_TAG, varint(next_offset), END_OFFSET_TAG, varint(end_offset),
                     PASSED_SCN_TAG, varint(passed_scn), PASSED_OFFSET_TAG,
                     varint(passed_offset)))


def incarnation_field(incarnation: str, tag: bytes = INCARNATION_TAG) -> bytes:
    """`ReadResponse.incarnation` (or, with its `tag`, BootstrapResponse's) as wire
    bytes, to put before the first response of a stream (b"" for ""): fields of a
    message may come in any order and a parser merges them, so the records'
    responses are built as before and only the first one is prefixed, once per
    stream."""
    if not incarnation:
        return b""
    data = incarnation.encode()
    return tag + varint(len(data)) + data


def first_response_head(incarnation: str, made_up: bool, tag: bytes = INCARNATION_TAG) -> bytes:
    """What a read's or a bootstrap's first response names of the topic's incarnation.

    b"" for one this broker made up when it loaded an older broker's topic
    (`made_up`: a relay follower may replace it with its upstream's while the
    log stays, so a reader must not hold on to it) and for one longer than a
    broker makes (a chunk reserves INCARNATION_FIELD_BYTES_MAX for it, so the
    first response stays within bytes_max: broker/read_path.py).
    """
    if made_up:
        return b""
    head = incarnation_field(incarnation, tag)
    return head if len(head) <= INCARNATION_FIELD_BYTES_MAX else b""
