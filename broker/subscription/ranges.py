"""Check the offset ranges of an Ack or Nack and turn them into two numpy arrays.

The broker trusts no field a client could compute wrongly: every range must
be half-open with 0 <= start < stop <= the partition's end offset. Ranges may
come in any order, overlap or touch; they are merged. The common case (the
SDK sends sorted, disjoint ranges as one packed field) costs a few numpy
calls and no Python object per range.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from broker.errors import BrokerError
from broker.subscription.cursor import merge_ranges
from sdk.core.offset_ranges import ranges_of_bounds
from sdk.core.pb import keybus_pb2 as pb

I64 = npt.NDArray[np.int64]
_FEW_RANGES = 8  # at most this many ranges are checked one by one, not with numpy


def checked_ranges(ranges: Sequence[pb.OffsetRange], bounds: bytes, end_offset: int,
                   partition: int, what: str) -> tuple[I64, I64]:
    """(starts, stops): sorted, disjoint, non-touching half-open ranges.

    Raises:
        BrokerError: ack_invalid, naming the first bad range and what is allowed.
    """
    try:
        starts, stops = ranges_of_bounds(bounds)
        if ranges:
            listed = np.array([(r.start, r.stop) for r in ranges], np.int64).reshape(-1, 2)
            starts = np.concatenate((starts, listed[:, 0]))
            stops = np.concatenate((stops, listed[:, 1]))
    except ValueError as e:
        raise BrokerError("ack_invalid", what=what, detail=str(e)) from None
    except OverflowError:
        raise BrokerError("ack_invalid", what=what, detail="an offset is beyond 2**63 - 1") from None
    if not len(starts):
        raise BrokerError("ack_invalid", what=what, detail="no offset ranges given")
    bad = _first_invalid(starts, stops, end_offset)
    if bad is not None:
        start, stop = bad
        raise BrokerError("ack_invalid", what=what, detail=(
            f"offset range [{start}, {stop}) of partition {partition} is invalid; need "
            f"start < stop <= {end_offset} (the partition's end offset), half-open"))
    if len(starts) > 1 and not bool((starts[1:] > stops[:-1]).all()):
        starts, stops = merge_ranges(starts, stops)
    return starts, stops


def _first_invalid(starts: I64, stops: I64, end_offset: int) -> tuple[int, int] | None:
    """The first range that is not 0 <= start < stop <= end_offset, or None."""
    if len(starts) <= _FEW_RANGES:  # a few (following the tail): one Python step each
        return next(((a, b) for a, b in zip(starts.tolist(), stops.tolist(), strict=True)
                     if not 0 <= a < b <= end_offset), None)
    if not ((starts >= stops).any() or stops.max() > end_offset or starts.min() < 0):
        return None
    first = ((starts >= stops) | (stops > end_offset) | (starts < 0)).nonzero()[0][0]
    return int(starts[first]), int(stops[first])


def sent_ranges(data: bytes, end_offset: int, partition: int) -> tuple[I64, I64, I64]:
    """(sends, starts, stops) of an `Ack.sent_ranges` field.

    Raises:
        BrokerError: ack_invalid: not whole triples, or a range that is not
            0 <= start < stop <= the partition's end offset.
    """
    if len(data) % 24:
        raise BrokerError("ack_invalid", what="ack", detail=(
            f"sent_ranges holds {len(data)} bytes; it holds triples of little-endian "
            f"int64 (send, start, stop: 24 bytes each)"))
    flat = np.frombuffer(data, "<i8").astype(np.int64, copy=False)  # read only
    sends, starts, stops = flat[0::3], flat[1::3], flat[2::3]
    bad = _first_invalid(starts, stops, end_offset)
    if bad is not None:
        start, stop = bad
        raise BrokerError("ack_invalid", what="ack", detail=(
            f"sent range [{start}, {stop}) of partition {partition} is invalid; need "
            f"start < stop <= {end_offset} (the partition's end offset), half-open"))
    return sends, starts, stops
