"""Filter id lists ("[1,3-6]"), the filter kinds and the error type: the lowest part of the filters.

Rule 1 of `sdk.core.filters` (list notation) lives here; `sdk.core.filters`
re-exports every public name, so import from there. Pure: no I/O.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence

from sdk.core.wire_ints import INT64_MAX

ID_LIST_ENTRIES_MAX = 10_000
"""Most comma-separated entries one id list may have."""

MOD_TABLE_BUCKETS_MAX = 1 << 16
"""Up to this many buckets MOD uses a byte table (1 byte per bucket); above, a bisect."""

IdIntervals = tuple[tuple[int, int], ...]
"""Sorted, disjoint, non-touching half-open intervals ((start, stop), ...)."""

_Selector = Callable[[Sequence[int]], list[int]]

_ID_ENTRY = re.compile(r"(-?[0-9]{1,19})(?:\s*-\s*(-?[0-9]{1,19}))?")
_INTEGER_TEXT = re.compile(r"[+-]?0*[0-9]{1,19}")
_POSITIVE_TEXT = re.compile(r"[0-9]{1,19}")
_LIST_FORM = "ids a or half-open ranges a-b ([a, b)), comma-separated in brackets, e.g. [1,3-6]"


class FilterError(ValueError):
    """Filter input that breaks the rules; the message names the entry and the allowed form."""


class FilterType(enum.Enum):
    """The filter kinds; values are the Databus config and protobuf names."""

    NONE = "NONE"
    RANGE = "RANGE"
    MOD = "MOD"




# ---------------------------------------------------------------------------
# List notation


def parse_id_list(text: str, field: str, upper: int | None = None) -> IdIntervals:
    """Parse list notation such as ``[1,3-6]`` into merged, sorted half-open intervals.

    Args:
        text: the list; ``a-b`` is half-open ``[a, b)``.
        field: the field or config property named in errors, e.g. ``mod.buckets``.
        upper: if given, every id must be below it (MOD: numBuckets).

    Returns:
        ((start, stop), ...) sorted, with overlapping or touching entries merged.

    Raises:
        FilterError: naming the offending entry and the allowed form.
    """
    body = text.strip()
    if len(body) < 2 or body[0] != "[" or body[-1] != "]":
        raise FilterError(f"{field} {text!r}: need a list of {_LIST_FORM}")
    entries = body[1:-1].split(",")
    if len(entries) == 1 and not entries[0].strip():
        raise FilterError(f"{field} {text!r}: the list is empty; need at least one entry, "
                          f"e.g. [0] or [1,3-6]")
    if len(entries) > ID_LIST_ENTRIES_MAX:
        raise FilterError(f"{field}: {len(entries)} entries is over the limit of "
                          f"{ID_LIST_ENTRIES_MAX}; write neighbouring ids as one range a-b")
    return _merge([_parse_entry(entry.strip(), field, upper) for entry in entries])


def format_id_list(intervals: IdIntervals) -> str:
    """Render intervals in list notation; `parse_id_list` reads it back unchanged."""
    return "[" + ",".join(_format_interval(start, stop) for start, stop in intervals) + "]"


def _format_interval(start: int, stop: int) -> str:
    return str(start) if stop == start + 1 else f"{start}-{stop}"


def _parse_entry(entry: str, field: str, upper: int | None) -> tuple[int, int]:
    match = _ID_ENTRY.fullmatch(entry)
    if match is None:
        raise FilterError(f"{field} entry {entry!r}: does not parse; need {_LIST_FORM} "
                          f"(ids are integers >= 0 of at most 19 digits)")
    start = int(match[1])
    stop = start + 1 if match[2] is None else int(match[2])
    _check_interval(start, stop, entry, field, upper)
    return start, stop


def _check_interval(start: int, stop: int, entry: str, field: str, upper: int | None) -> None:
    if start < 0 or stop < 0:
        raise FilterError(f"{field} entry {entry!r}: negative ids are not allowed; need ids >= 0")
    if start >= stop:
        raise FilterError(f"{field} entry {entry!r}: need a < b in a-b (half-open [a, b))")
    if upper is not None and stop > upper:
        raise FilterError(f"{field} entry {entry!r}: ids must be below {upper} (numBuckets); "
                          f"need a < {upper}, and b <= {upper} in a-b (half-open [a, b))")


def _merge(intervals: list[tuple[int, int]]) -> IdIntervals:
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return tuple(merged)


def _validated(intervals: IdIntervals, field: str, upper: int | None) -> IdIntervals:
    """Intervals given as tuples (not text): the same checks, then merged."""
    if not intervals:
        raise FilterError(f"{field}: the list is empty; need at least one entry, e.g. [0]")
    for start, stop in intervals:
        _check_interval(start, stop, _format_interval(start, stop), field, upper)
    return _merge(list(intervals))


def _require_positive(value: int, field: str) -> None:
    if not 0 < value <= INT64_MAX:
        raise FilterError(f"{field} {value}: need a positive integer (1..{INT64_MAX})")


def _parse_positive(text: str, field: str) -> int:
    body = text.strip()
    if _POSITIVE_TEXT.fullmatch(body) is None:
        raise FilterError(f"{field} {text!r}: need a positive integer (1..{INT64_MAX})")
    value = int(body)
    _require_positive(value, field)
    return value
