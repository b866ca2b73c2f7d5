"""The most bytes each part of a Bootstrap SNAPSHOT message takes on the wire. Pure.

A chunk's bytes_max bounds the whole BootstrapResponse it goes out in, so that
at the default of 4 MiB it fits gRPC's default receive limit of any client
(broker/read_path.py says why). The chunker (snapshot.py) counts each part
from lengths it already has, as the log path counts its framing: nothing is
serialized to be measured, and an entry costs a few integer additions.

A message is, at most (a field: its tag, then a varint of at most 10 bytes or
a length of at most 5 and that many bytes):

* the response's own fields (`RESPONSE_FIELDS_BYTES_MAX`): next_offset,
  end_offset, the phase, the marker (the first message: six varint fields)
  and the topic's incarnation (the first message), reserved in every chunk;
* the resume point (`resume_bytes_max`): a BootstrapResume of five varint
  fields, the source name and the last key looked at. Keys have no length
  limit of their own and a source name may take 65,535 bytes, so this is
  counted for the entry that would end the chunk, not reserved as a constant
  (a fixed 4 KiB reserve let a chunk of 60 KiB keys go ~56 KiB past bytes_max);
* each Record (`record_fields_bytes_max`): its framing, the topic name and the
  source name, its scalar fields, the batch's framing and count, and the tag
  and length of each packed column (offsets, scns, publish_times_ms,
  key_ints, slots, opcodes, event_times_ms);
* each entry: its key part (codec.key_part: a tag byte, then the UTF-8 or
  8 bytes) and its stored value less the head the message does not carry,
  plus `ENTRY_COLUMNS_BYTES_MAX` of columns.
"""

from __future__ import annotations

from broker.read_path import INCARNATION_FIELD_BYTES_MAX, RECORD_FRAMING_BYTES_MAX

VARINT_FIELD_BYTES_MAX = 1 + 10
LENGTH_FIELD_BYTES_MAX = 1 + 5  # tag and length of a bytes, string or message field
VARINT_BYTES_MAX = 10

# next_offset and end_offset, the phase (an enum: 2), the marker (six varint fields,
# 66 bytes: a one-byte length) and the incarnation.
MARKER_FIELD_BYTES_MAX = 1 + 1 + 6 * VARINT_FIELD_BYTES_MAX
RESPONSE_FIELDS_BYTES_MAX = (2 * VARINT_FIELD_BYTES_MAX + 2 + MARKER_FIELD_BYTES_MAX
                             + INCARNATION_FIELD_BYTES_MAX)

# The resume field's own framing; phase, has_source and has_key (2 each); snapshot_offset,
# next_offset, target_offset; the source's and the key's tag and length (an int key:
# a zigzag varint of at most 10 bytes against its key part of 9).
RESUME_FIELDS_BYTES_MAX = (LENGTH_FIELD_BYTES_MAX + 3 * 2 + 3 * VARINT_FIELD_BYTES_MAX
                           + 2 * LENGTH_FIELD_BYTES_MAX)

# Record: partition, base_offset, scn_first, publish_time_ms; window (2); topic's and
# batch's framing; the batch's count and its sources' framing; seven packed columns.
RECORD_FIELDS_BYTES_MAX = (RECORD_FRAMING_BYTES_MAX + 4 * VARINT_FIELD_BYTES_MAX + 2
                           + 2 * LENGTH_FIELD_BYTES_MAX + VARINT_FIELD_BYTES_MAX
                           + LENGTH_FIELD_BYTES_MAX + 7 * LENGTH_FIELD_BYTES_MAX)

# One entry's columns beyond its key part and stored bytes: offset, SCN, publish and
# event time (10 each), slot (3), opcode (2); its key beyond its key part (7 at most: a
# string's tag and length, 6, less the key part's tag, plus the int column's 0 when keys
# are mixed; an int's 10 bytes and its empty string's 2 against its key part of 9); the
# framing of its value, ordering key, schema and headers.
ENTRY_COLUMNS_BYTES_MAX = 4 * VARINT_BYTES_MAX + 3 + 2 + 7 + 4 * LENGTH_FIELD_BYTES_MAX


def resume_bytes_max(source_bytes: int, key_part_bytes: int) -> int:
    """The resume field naming a key of this key part under a source of this UTF-8 size."""
    return RESUME_FIELDS_BYTES_MAX + source_bytes + key_part_bytes


def record_fields_bytes_max(topic_bytes: int, source_bytes: int) -> int:
    """A Record's bytes besides its entries, framing in the response included."""
    return RECORD_FIELDS_BYTES_MAX + topic_bytes + source_bytes
