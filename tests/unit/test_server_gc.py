"""The broker process and the garbage collector (broker/gc_pauses.py)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from broker import gc_pauses
from broker.metrics import GC_PAUSE_SECONDS


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


@pytest.fixture
def unfrozen() -> Iterator[None]:
    assert gc.get_freeze_count() == 0, "another test left objects frozen"
    yield
    gc.unfreeze()


def test_startup_objects_are_frozen(unfrozen: None) -> None:
    kept = _Node()
    gc_pauses.freeze_startup_objects()
    assert gc.get_freeze_count() > 0
    assert not any(obj is kept for obj in gc.get_objects())  # frozen: no collection walks it


def test_garbage_is_collected_not_frozen(unfrozen: None) -> None:
    """Frozen objects are never freed: what is garbage at start-up must go first."""
    node = _Node()
    gone = weakref.ref(node)
    del node
    gc_pauses.freeze_startup_objects()
    assert gone() is None


def _collections(generation: int) -> float:
    for metric in GC_PAUSE_SECONDS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count") and sample.labels["generation"] == str(generation):
                return sample.value
    return 0.0


def test_each_collection_is_timed_by_generation() -> None:
    timer = gc_pauses.PauseTimer()
    timer.install()
    try:
        before = [_collections(g) for g in range(3)]
        gc.collect(0)
        gc.collect(2)
        after = [_collections(g) for g in range(3)]
    finally:
        timer.uninstall()
    assert after[0] >= before[0] + 1 and after[2] == before[2] + 1
    gc.collect(2)
    assert _collections(2) == after[2]  # uninstalled: no longer timed
