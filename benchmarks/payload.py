"""The bytes every system carries: the same keys and values for all of them.

A value is an 8-byte big-endian send time (CLOCK_MONOTONIC nanoseconds, one
clock for every process on the machine) followed by filler, so a consumer in
another process measures publish-to-delivery latency from the payload alone.
Pure: the caller passes the time in.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterable

from benchmarks.measurement import STAMP_BYTES

_STAMP = struct.Struct(">q")
_FILLER = random.Random(11).randbytes(1 << 16)
KEYS_CYCLE_MAX = 100_000  # key lists repeat after this many events, as scenarios.py does


def stamped_value(value_bytes: int, sent_ns: int) -> bytes:
    """A value of exactly `value_bytes` that starts with the send time."""
    if not STAMP_BYTES <= value_bytes <= STAMP_BYTES + len(_FILLER):
        raise ValueError(f"value_bytes {value_bytes} out of range {STAMP_BYTES}.."
                         f"{STAMP_BYTES + len(_FILLER)}")
    return _STAMP.pack(sent_ns) + _FILLER[: value_bytes - STAMP_BYTES]


def sent_ns_of(value: bytes) -> int:
    return int(_STAMP.unpack_from(value)[0])


def latencies_ms(values: Iterable[bytes], received_ns: int, sent_from_ns: int = 0) -> list[float]:
    """Milliseconds from each value's send time to `received_ns`, for values sent
    at or after `sent_from_ns` (earlier ones belong to a warm-up)."""
    unpack = _STAMP.unpack_from
    return [(received_ns - sent) / 1e6 for sent in (unpack(value)[0] for value in values)
            if sent >= sent_from_ns]


def key_sequence(keys: int, events: int, seed: int = 7) -> list[int]:
    """Uniform random keys in 0..keys-1; the caller cycles through the list."""
    rng = random.Random(seed)
    return [rng.randrange(keys) for _ in range(min(events, KEYS_CYCLE_MAX))]
