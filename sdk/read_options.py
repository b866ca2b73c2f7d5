"""What a read asks for, as protobuf: its start, hash ranges and key filter.

Pure conversions, checked by the shared rules (sdk.core), each raising
ValueError that names the field and what is allowed. The Reader, the
Consumer, subscription admin and the Databus client build their requests
with them; `sdk.reader` re-exports them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from sdk.bootstrap import BootstrapPosition
from sdk.core.filters import KeyFilterSpec
from sdk.core.model import HashRange, parse_ranges
from sdk.core.pb import keybus_pb2 as pb

Start = str | int | Mapping[str, int] | BootstrapPosition
POSITION_MAX = (1 << 64) - 1  # StartPosition's offset and scn are uint64 on the wire


class ToProto(Protocol):
    """Any key filter object that makes its message (sdk.core.filters.KeyFilterSpec)."""

    def to_proto(self) -> pb.KeyFilter: ...


def start_to_proto(start: Start, field: str = "start", bootstrap_ok: bool = False
                   ) -> pb.StartPosition:
    """A StartPosition from "earliest", "latest", an offset or {"scn": n}.

    Args:
        field: the caller's name for it, for the message ("start", "position").
        bootstrap_ok: the caller also takes "bootstrap" (Reader does, before
            this is called); only the message changes: a caller that cannot
            bootstrap must not offer it.
    Raises:
        ValueError: anything else (an offset or SCN outside the wire's uint64
            included), naming `field` and what is allowed.
    """
    if start == "earliest":
        return pb.StartPosition(earliest=True)
    if start == "latest":
        return pb.StartPosition(latest=True)
    if type(start) is int and 0 <= start <= POSITION_MAX:
        return pb.StartPosition(offset=start)
    if isinstance(start, Mapping) and set(start) == {"scn"} and type(start["scn"]) is int \
            and 0 <= start["scn"] <= POSITION_MAX:
        return pb.StartPosition(scn=start["scn"])
    bootstrap = "'bootstrap', " if bootstrap_ok else ""
    raise ValueError(f"{field} {start!r} is invalid: use 'earliest', 'latest', {bootstrap}an "
                     "offset 0..2**64-1, or {'scn': n} with n 0..2**64-1")


def ranges_to_proto(
        ranges: str | Iterable[HashRange | tuple[int, int]] | None) -> list[pb.HashRange]:
    """Hash ranges as protobuf, checked by the shared rules (sdk.core.model).

    Raises:
        ValueError (RangeError): a range outside 0..65535 or first > last.
    """
    if ranges is None:
        return []
    if isinstance(ranges, str):
        checked = parse_ranges(ranges)
    else:
        checked = [r if isinstance(r, HashRange) else HashRange(*r) for r in ranges]
    return [pb.HashRange(slot_first=r.slot_first, slot_last=r.slot_last) for r in checked]


def filter_to_proto(key_filter: str | pb.KeyFilter | ToProto | None) -> pb.KeyFilter | None:
    """A KeyFilter message from a message, anything with to_proto(), or the
    CLI text form ("mod:10:[0,3]", "range:5000000:[1,3-6]@orders").

    Raises:
        ValueError: an object that is none of those (FilterError for bad text).
    """
    if key_filter is None or isinstance(key_filter, pb.KeyFilter):
        return key_filter
    if isinstance(key_filter, str):
        return KeyFilterSpec.parse_cli(key_filter).to_proto()
    to_proto = getattr(key_filter, "to_proto", None)
    if callable(to_proto):
        message = to_proto()
        if isinstance(message, pb.KeyFilter):
            return message
    raise ValueError(f"key_filter {key_filter!r} is invalid: give a keybus KeyFilter message "
                     "or an object with to_proto()")
