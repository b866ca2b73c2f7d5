"""A checkpoint store in a directory: one JSON file per partition.

For the embedded case (one machine, no broker-side store wanted). Layout:
`ROOT/<namespace>/<topic>/<consumer_group>/checkpoint/<partition>.json`, each
name percent-encoded so any string is a safe path component ("" becomes
"%00"). A write goes to a temporary file that is fsynced, renamed over the
old one and the directory fsynced: a crash leaves the old checkpoint or the
new one, never a torn file. This store cannot fence a stale owner (it knows
nothing of ownership); `supports_fencing` says so.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from urllib.parse import quote

from sdk.stores.records import Checkpoint

_FIELDS = ("offset", "scn", "epoch")


def _component(name: str) -> str:
    return quote(name, safe="") or "%00"


class FileCheckpointStore:
    """`CheckpointStore` over a directory of JSON files (see the module docstring)."""

    supports_fencing = False

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
        await asyncio.to_thread(self._write, checkpoint)

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
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise ValueError(f"checkpoint file {path} is unreadable: {e}") from e
        if not all(isinstance(data.get(name), int) for name in _FIELDS):
            raise ValueError(f"checkpoint file {path} lacks integer fields {', '.join(_FIELDS)}")
        return Checkpoint(namespace, topic, consumer_group, partition,
                          data["offset"], data["scn"], data["epoch"], str(data.get("bootstrap", "")))

    def _write(self, checkpoint: Checkpoint) -> None:
        if checkpoint.partition < 0 or checkpoint.offset < 0 or checkpoint.scn < 0:
            raise ValueError(f"checkpoint {checkpoint}: partition, offset and scn must be >= 0")
        directory = self._group_dir(checkpoint.namespace, checkpoint.topic,
                                    checkpoint.consumer_group)
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / f"{checkpoint.partition}.json"
        temporary = directory / f".{checkpoint.partition}.json.tmp"
        fields = {name: getattr(checkpoint, name) for name in _FIELDS}
        if checkpoint.bootstrap:
            fields["bootstrap"] = checkpoint.bootstrap
        body = json.dumps(fields)
        with open(temporary, "w") as file:
            file.write(body)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, final)
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
