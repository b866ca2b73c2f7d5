"""The hash slot of an ordering key; nothing else.

Rule (shared by broker, SDK and Spark connector, and equal to Pulsar's):
    slot = (murmur3_32(utf8(ordering_key), seed=0) & 0x7FFFFFFF) % 65536

An int key is hashed as its decimal text (``42`` -> ``"42"``), so a key
means the same slot whether a client sends it as an int or as a string, and
the same as a Pulsar message key with that text.
"""

from __future__ import annotations

from collections.abc import Iterable

import mmh3

SLOT_COUNT = 65536
SLOT_MAX = SLOT_COUNT - 1

_hash = mmh3.hash


def slot_of(ordering_key: str | int) -> int:
    """Return the slot (0..65535) of one ordering key."""
    if isinstance(ordering_key, int):
        ordering_key = str(ordering_key)
    return (_hash(ordering_key, 0, False) & 0x7FFFFFFF) % SLOT_COUNT


def slots_of(ordering_keys: Iterable[str | int]) -> list[int]:
    """Return the slots of many ordering keys (one call per batch)."""
    h = _hash
    # & SLOT_MAX equals % SLOT_COUNT (a power of two) and is cheaper per key.
    return [(h(k if isinstance(k, str) else str(k), 0, False) & 0x7FFFFFFF) & SLOT_MAX
            for k in ordering_keys]


class SlotCache:
    """`slots_of` for a stream of batches whose keys repeat (keys are reused
    across a topic's events): known keys are looked up in one C-level
    `map(dict.get)` pass, only new keys are hashed. At most `entries_max`
    keys are kept; past it the cache starts over (its job is speed, never
    correctness: every value in it is `slot_of(key)`).

    Measured (1,000-key batches, benchmarks/RESULTS.md "Slots verified by the
    broker"): about 30 ns per key once cached against 140-170 ns for
    `slots_of`; a numpy version of murmur3 cost 790 ns per key at this size.
    """

    __slots__ = ("_slots", "entries_max")

    def __init__(self, entries_max: int = 1 << 17) -> None:
        self._slots: dict[str | int, int] = {}
        self.entries_max = entries_max

    def slots(self, ordering_keys: list[str | int]) -> list[int]:
        """The slot of every key, as `slots_of` computes it."""
        cache = self._slots
        try:
            return list(map(cache.__getitem__, ordering_keys))
        except KeyError:
            pass
        missing = [k for k in ordering_keys if k not in cache]
        if len(cache) + len(missing) > self.entries_max:  # start over with this batch's keys
            cache.clear()
            slots = slots_of(ordering_keys)
            if len(ordering_keys) <= self.entries_max:
                cache.update(zip(ordering_keys, slots, strict=True))
            return slots
        cache.update(zip(missing, slots_of(missing), strict=True))
        return list(map(cache.__getitem__, ordering_keys))


def partition_of(slot: int, partitions: int) -> int:
    """Route a slot to a partition: slot % partitions.

    Modulo, not contiguous blocks, so every partition sees slots from the whole
    0..65535 space and Key_Shared ranges split each partition evenly.
    """
    return slot % partitions
