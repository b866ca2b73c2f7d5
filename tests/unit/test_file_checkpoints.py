"""FileCheckpointStore: one JSON file per partition, atomic replace, any names,
fenced by ownership epoch.

Method: real files in a temp dir; read back through a second store object
(what a restarted process does), and a leftover temporary file from a crash
mid-write must not hide the last good checkpoint. Fencing: the broker's
rules (an older epoch refused naming the owner, an unregistered one refused
as a client bug, epoch 0 unfenced), seen by a second store object too.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sdk.errors import FailedPrecondition, InvalidArgument
from sdk.stores import Checkpoint, CheckpointStore, FileCheckpointStore, OwnershipLost
from sdk.stores.fencing import fences


def run(coroutine):  # type: ignore[no-untyped-def]
    return asyncio.run(coroutine)


def test_is_a_checkpoint_store(tmp_path: Path) -> None:
    assert isinstance(FileCheckpointStore(tmp_path), CheckpointStore)
    assert fences(FileCheckpointStore(tmp_path))


def test_update_then_read_back_from_a_new_store(tmp_path: Path) -> None:
    store = FileCheckpointStore(tmp_path)
    run(store.fence("ns", "orders", "billing", 3, 2, "owner"))  # epoch 2 registered
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


def test_fences_an_older_epoch_and_names_the_owner(tmp_path: Path) -> None:
    store = FileCheckpointStore(tmp_path)
    run(store.fence("n", "t", "g", 1, 5, "owner-a"))
    run(store.update_checkpoint(Checkpoint("n", "t", "g", 1, 7, 8, epoch=5)))
    run(store.fence("n", "t", "g", 1, 9, "owner-b"))  # a new owner registers
    with pytest.raises(OwnershipLost, match=r"'owner-b'.*nothing was written"):
        run(store.update_checkpoint(Checkpoint("n", "t", "g", 1, 3, 4, epoch=5)))
    again = FileCheckpointStore(tmp_path)  # another process sees the same fence
    assert run(again.get_checkpoint("n", "t", "g", 1)).offset == 7  # type: ignore[union-attr]
    with pytest.raises(OwnershipLost):
        run(again.update_checkpoint(Checkpoint("n", "t", "g", 1, 3, 4, epoch=5)))
    with pytest.raises(FailedPrecondition, match="never registered") as unregistered:
        run(store.update_checkpoint(Checkpoint("n", "t", "g", 1, 3, 4, epoch=10)))
    assert not isinstance(unregistered.value, OwnershipLost)
    with pytest.raises(OwnershipLost, match="'owner-b'"):
        run(store.fence("n", "t", "g", 1, 8, "owner-c"))
    with pytest.raises(OwnershipLost, match="one owner"):
        run(store.fence("n", "t", "g", 1, 9, "owner-c"))
    run(store.fence("n", "t", "g", 1, 9, "owner-b"))  # idempotent
    run(store.update_checkpoint(Checkpoint("n", "t", "g", 1, 12, 13, epoch=0)))  # unfenced
    assert run(store.get_checkpoint("n", "t", "g", 1)).offset == 12  # type: ignore[union-attr]
    assert [c.partition for c in run(store.list_checkpoints("n", "t", "g"))] == [1]


def test_refuses_a_bad_registration_and_reports_a_corrupt_fence(tmp_path: Path) -> None:
    store = FileCheckpointStore(tmp_path)
    with pytest.raises(InvalidArgument, match="epoch=0"):
        run(store.fence("n", "t", "g", 0, 0, "a"))
    with pytest.raises(InvalidArgument, match="owner_id=''"):
        run(store.fence("n", "t", "g", 0, 3, ""))
    with pytest.raises(ValueError, match="must be >= 0"):
        run(store.fence("n", "t", "g", -1, 3, "a"))
    run(store.fence("n", "t", "g", 0, 3, "a"))
    next(tmp_path.rglob("0.fence")).write_text('{"epoch": "3"}')
    with pytest.raises(ValueError, match=r"fence file .* lacks"):
        run(store.update_checkpoint(Checkpoint("n", "t", "g", 0, 1, 1, epoch=3)))

