"""Frozen value types shared by broker and SDK: hash ranges and topic partitions.

Rules: a HashRange is an inclusive slot interval inside 0..65535; lists of
ranges are kept sorted and non-overlapping by `normalize_ranges`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdk.core.hashing import SLOT_COUNT, SLOT_MAX


class RangeError(ValueError):
    """A hash range or range list that breaks the rules; the message says why."""


@dataclass(frozen=True, slots=True, order=True)
class HashRange:
    """Inclusive slot interval [slot_first, slot_last] within 0..65535."""

    slot_first: int
    slot_last: int

    def __post_init__(self) -> None:
        if not 0 <= self.slot_first <= self.slot_last <= SLOT_MAX:
            raise RangeError(
                f"hash range {self.slot_first}-{self.slot_last} is invalid: "
                f"need 0 <= first <= last <= {SLOT_MAX}"
            )

    @property
    def size(self) -> int:
        return self.slot_last - self.slot_first + 1

    def contains(self, slot: int) -> bool:
        return self.slot_first <= slot <= self.slot_last

    def __str__(self) -> str:
        return f"{self.slot_first}-{self.slot_last}"


FULL_RANGE = HashRange(0, SLOT_MAX)


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int


def parse_ranges(text: str) -> list[HashRange]:
    """Parse "0-16383,16384-65535" (inclusive ends; a lone "7" is 7-7).

    Raises:
        RangeError: naming the entry that does not parse and the allowed form.
    """
    ranges: list[HashRange] = []
    for entry in text.split(","):
        entry = entry.strip()
        first, sep, last = entry.partition("-")
        try:
            lo = int(first)
            hi = int(last) if sep else lo
        except ValueError:
            raise RangeError(
                f"hash range {entry!r} does not parse: use FIRST-LAST with inclusive "
                f"slots in 0..{SLOT_MAX}, comma-separated, e.g. 0-16383,16384-65535"
            ) from None
        ranges.append(HashRange(lo, hi))
    return normalize_ranges(ranges, allow_overlap=False)


def normalize_ranges(ranges: list[HashRange], allow_overlap: bool = True) -> list[HashRange]:
    """Sort ranges and merge touching ones; overlaps raise unless allowed."""
    merged: list[HashRange] = []
    for r in sorted(ranges):
        if merged and r.slot_first <= merged[-1].slot_last + 1:
            last = merged[-1]
            if r.slot_first <= last.slot_last and not allow_overlap:
                raise RangeError(f"hash ranges {last} and {r} overlap")
            merged[-1] = HashRange(last.slot_first, max(last.slot_last, r.slot_last))
        else:
            merged.append(r)
    return merged


def equal_splits(n: int) -> list[HashRange]:
    """Split 0..65535 into n contiguous ranges whose sizes differ by at most one."""
    if not 1 <= n <= SLOT_COUNT:
        raise RangeError(f"number of splits {n} is invalid: need 1..{SLOT_COUNT}")
    bounds = [i * SLOT_COUNT // n for i in range(n + 1)]
    return [HashRange(bounds[i], bounds[i + 1] - 1) for i in range(n)]


def slot_mask(ranges: list[HashRange]) -> bytes:
    """A 65536-byte table, 1 where a slot falls in one of the ranges.

    Lets a hot loop test a slot with one index instead of a scan of ranges.
    """
    mask = bytearray(SLOT_COUNT)
    for r in ranges:
        mask[r.slot_first : r.slot_last + 1] = b"\x01" * r.size
    return bytes(mask)
