"""The wire's integer ranges (protobuf's int32, uint32, int64 and uint64 fields).

One place for them, in the lowest layer: the SDK checks an argument against
them before a call (protobuf's own "Value out of range" names no field), the
broker's filters and the CLI's options use the same numbers.
"""

from __future__ import annotations

INT32_MAX = (1 << 31) - 1
UINT32_MAX = (1 << 32) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
