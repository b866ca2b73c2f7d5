"""A checkpoint store in a directory: one JSON file per partition.

For the embedded case (one machine, no broker-side store wanted). Layout:
`ROOT/<namespace>/<topic>/<consumer_group>/checkpoint/<partition>.json`, each
name percent-encoded so any string is a safe path component ("" becomes
"%00"). A write goes to a temporary file that is fsynced, renamed over the
old one and the directory fsynced: a crash leaves the old checkpoint or the
new one, never a torn file.

It fences (`fence_rules.py`): `<partition>.fence` holds the highest ownership
epoch registered and its owner, and a checkpoint of an older epoch is refused
(`OwnershipLost`). A registration and a checkpoint write of one partition
each run under an exclusive `flock` of `.<partition>.lock`, so they are
decided one at a time across threads and processes of this machine (the
embedded case; a directory shared over NFS is not). That is what keeps a
write already under way when its writer's claim lapsed from landing after the
new owner registered: it waits for the lock, then meets the new fence. A
read takes no lock (a rename is atomic).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sdk.stores.fence_rules import Fence, check_checkpoint_epoch, decide_fence
from sdk.stores.records import Checkpoint

_FIELDS = ("offset", "scn", "epoch")


def _component(name: str) -> str:
    return quote(name, safe="") or "%00"


class FileCheckpointStore:
    """`CheckpointStore` over a directory of JSON files (see the module docstring)."""

    supports_fencing = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _group_dir(self, namespace: str, topic: str, consumer_group: str) -> Path:
        return (self.root / _component(namespace) / _component(topic)
                / _component(consumer_group) / "checkpoint")

    async def list_checkpoints(self, namespace: str, topic: str,
                               consumer_group: str) -> list[Checkpoint]:
        return await asyncio.to_thread(self._list, namespace, topic, consumer_group)

    async def get_checkpoint(self, namespace: str, topic: str, consumer_group: str,
                             partition: int) -> Checkpoint | None:
        path = self._group_dir(namespace, topic, consumer_group) / f"{partition}.json"
        return await asyncio.to_thread(self._read, path, namespace, topic, consumer_group, partition)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Store the checkpoint (fsynced) unless its epoch is fenced off.

        Raises:
            OwnershipLost: checkpoint.epoch is older than the partition's
                fence (another processor owns it; the message names it).
            FailedPrecondition: an epoch > 0 never registered.
            ValueError: a negative partition, offset or scn.
        """
        await asyncio.to_thread(self._write, checkpoint)

    async def fence(self, namespace: str, topic: str, consumer_group: str, partition: int,
                    epoch: int, owner_id: str) -> None:
        """Register the epoch `owner_id` won (any ownership store); older
        epochs' checkpoints of the partition are refused from now on.

        Raises:
            OwnershipLost: a newer epoch is registered, or this one to another owner.
            InvalidArgument: epoch <= 0 or an empty owner id.
        """
        await asyncio.to_thread(self._fence, namespace, topic, consumer_group, partition,
                                epoch, owner_id)

    def _list(self, namespace: str, topic: str, consumer_group: str) -> list[Checkpoint]:
        directory = self._group_dir(namespace, topic, consumer_group)
        if not directory.is_dir():
            return []
        found = []
        for path in directory.glob("*.json"):
            if path.stem.isdigit():
                checkpoint = self._read(path, namespace, topic, consumer_group, int(path.stem))
                if checkpoint is not None:
                    found.append(checkpoint)
        return sorted(found, key=lambda c: c.partition)

    @staticmethod
    def _read(path: Path, namespace: str, topic: str, consumer_group: str,
              partition: int) -> Checkpoint | None:
        data = _load(path, "checkpoint")
        if data is None:
            return None
        if not all(isinstance(data.get(name), int) for name in _FIELDS):
            raise ValueError(f"checkpoint file {path} lacks integer fields {', '.join(_FIELDS)}")
        return Checkpoint(namespace, topic, consumer_group, partition,
                          data["offset"], data["scn"], data["epoch"], str(data.get("bootstrap", "")),
                          str(data.get("incarnation", "")))  # absent in older files

    def _write(self, checkpoint: Checkpoint) -> None:
        if checkpoint.partition < 0 or checkpoint.offset < 0 or checkpoint.scn < 0:
            raise ValueError(f"checkpoint {checkpoint}: partition, offset and scn must be >= 0")
        directory = self._group_dir(checkpoint.namespace, checkpoint.topic,
                                    checkpoint.consumer_group)
        fields: dict[str, object] = {name: getattr(checkpoint, name) for name in _FIELDS}
        if checkpoint.bootstrap:
            fields["bootstrap"] = checkpoint.bootstrap
        if checkpoint.incarnation:
            fields["incarnation"] = checkpoint.incarnation
        where = _where(checkpoint.topic, checkpoint.partition, checkpoint.consumer_group)
        with _locked(directory, checkpoint.partition):
            check_checkpoint_epoch(_read_fence(directory, checkpoint.partition), checkpoint.epoch,
                                   where)
            _replace(directory, f"{checkpoint.partition}.json", json.dumps(fields))

    def _fence(self, namespace: str, topic: str, consumer_group: str, partition: int,
               epoch: int, owner_id: str) -> None:
        if partition < 0:
            raise ValueError(f"fence of partition {partition}: the partition must be >= 0")
        directory = self._group_dir(namespace, topic, consumer_group)
        with _locked(directory, partition):
            raised = decide_fence(_read_fence(directory, partition), epoch, owner_id,
                                  _where(topic, partition, consumer_group))
            if raised is not None:
                _replace(directory, f"{partition}.fence",
                         json.dumps({"epoch": raised.epoch, "owner": raised.owner_id}))


def _where(topic: str, partition: int, consumer_group: str) -> str:
    return f"{topic!r}/{partition} in group {consumer_group!r}"


@contextlib.contextmanager
def _locked(directory: Path, partition: int) -> Iterator[None]:
    """Hold the partition's exclusive lock: one registration or write at a time
    (flock: across threads, each opening the file itself, and processes)."""
    directory.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(directory / f".{partition}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def _load(path: Path, what: str) -> dict[str, Any] | None:
    """A JSON file's object, or None when there is no such file.

    Raises:
        ValueError: naming the file (`what` file PATH) when it does not read as JSON.
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"{what} file {path} is unreadable: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{what} file {path} is unreadable: not a JSON object")
    return data


def _read_fence(directory: Path, partition: int) -> Fence | None:
    path = directory / f"{partition}.fence"
    data = _load(path, "fence")
    if data is None:
        return None
    if not isinstance(data.get("epoch"), int) or not isinstance(data.get("owner"), str):
        raise ValueError(f"fence file {path} lacks an integer epoch and a text owner")
    return Fence(data["epoch"], data["owner"])


def _replace(directory: Path, name: str, body: str) -> None:
    """Write `name` atomically: temporary file fsynced, renamed over, directory fsynced."""
    temporary = directory / f".{name}.tmp"
    with open(temporary, "w") as file:
        file.write(body)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, directory / name)
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
