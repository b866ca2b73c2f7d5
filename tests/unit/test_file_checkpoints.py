"""FileCheckpointStore: one JSON file per partition, atomic replace, any names.

Method: real files in a temp dir; read back through a second store object
(what a restarted process does), and a leftover temporary file from a crash
mid-write must not hide the last good checkpoint.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sdk.stores import Checkpoint, CheckpointStore, FileCheckpointStore


def run(coroutine):  # type: ignore[no-untyped-def]
    return asyncio.run(coroutine)


def test_is_a_checkpoint_store(tmp_path: Path) -> None:
    assert isinstance(FileCheckpointStore(tmp_path), CheckpointStore)
    assert FileCheckpointStore.supports_fencing is False


def test_update_then_read_back_from_a_new_store(tmp_path: Path) -> None:
    store = FileCheckpointStore(tmp_path)
    run(store.update_checkpoint(Checkpoint("ns", "orders", "billing", 3, 41, 9, 2)))
    run(store.update_checkpoint(Checkpoint("ns", "orders", "billing", 0, 7, 5)))
    run(store.update_checkpoint(Checkpoint("ns", "orders", "billing", 3, 50, 12, 2)))
    again = FileCheckpointStore(tmp_path)
    assert run(again.get_checkpoint("ns", "orders", "billing", 3)) == Checkpoint(
        "ns", "orders", "billing", 3, 50, 12, 2)
    assert [c.partition for c in run(again.list_checkpoints("ns", "orders", "billing"))] == [0, 3]
    assert run(again.get_checkpoint("ns", "orders", "billing", 1)) is None
    assert run(again.list_checkpoints("ns", "orders", "other")) == []


def test_groups_and_odd_names_stay_apart(tmp_path: Path) -> None:
    store = FileCheckpointStore(tmp_path)
    run(store.update_checkpoint(Checkpoint("", "a/b", "../g", 0, 1, 1)))
    run(store.update_checkpoint(Checkpoint("", "a", "b/../g", 0, 2, 2)))
    assert run(store.get_checkpoint("", "a/b", "../g", 0)).offset == 1  # type: ignore[union-attr]
    assert run(store.get_checkpoint("", "a", "b/../g", 0)).offset == 2  # type: ignore[union-attr]
    assert all(p.is_relative_to(tmp_path) for p in tmp_path.rglob("*"))


def test_a_crash_mid_write_leaves_the_old_checkpoint(tmp_path: Path) -> None:
    store = FileCheckpointStore(tmp_path)
    run(store.update_checkpoint(Checkpoint("n", "t", "g", 0, 10, 3)))
    directory = next(tmp_path.rglob("checkpoint"))
    (directory / ".0.json.tmp").write_text('{"offset": 9')  # torn temporary file
    assert run(store.get_checkpoint("n", "t", "g", 0)).offset == 10  # type: ignore[union-attr]
    assert len(run(store.list_checkpoints("n", "t", "g"))) == 1


def test_refuses_negative_positions_and_reports_a_corrupt_file(tmp_path: Path) -> None:
    store = FileCheckpointStore(tmp_path)
    with pytest.raises(ValueError, match="must be >= 0"):
        run(store.update_checkpoint(Checkpoint("n", "t", "g", 0, -1, 0)))
    run(store.update_checkpoint(Checkpoint("n", "t", "g", 0, 1, 1)))
    next(tmp_path.rglob("0.json")).write_text("not json")
    with pytest.raises(ValueError, match="unreadable"):
        run(store.get_checkpoint("n", "t", "g", 0))
