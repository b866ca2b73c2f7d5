"""Pure rendering of event processor stores: one row per partition, as a dict
(for --json) and as a table.

Ownership rows: owner ("" = released, None = never claimed), age since the
last claim, time until it expires (negative: expired, so claimable), epoch.
Checkpoint rows: offset, scn, epoch and the lag to the end of the log (the
events after the checkpoint; without a checkpoint, every stored event).
"""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType

from keybus.cli.render import fit_table
from sdk.core.pb import keybus_pb2 as pb
from sdk.stores.records import Checkpoint, PartitionOwnership


def ownership_rows(info: pb.TopicInfo, ownership: list[PartitionOwnership], now_ms: int,
                   expiration_ms: int) -> list[dict[str, Any]]:
    by_partition = {o.partition: o for o in ownership}
    rows: list[dict[str, Any]] = []
    for partition in info.partitions:
        record = by_partition.get(partition.partition)
        if record is None:
            rows.append({"partition": partition.partition, "owner": None, "age_ms": None,
                         "expires_in_ms": None, "epoch": None, "etag": None})
            continue
        age = now_ms - record.last_modified_ms
        rows.append({"partition": record.partition, "owner": record.owner_id, "age_ms": age,
                     "expires_in_ms": expiration_ms - age if record.owner_id else None,
                     "epoch": record.epoch, "etag": record.etag})
    return rows


def checkpoint_rows(info: pb.TopicInfo, checkpoints: list[Checkpoint]) -> list[dict[str, Any]]:
    by_partition = {c.partition: c for c in checkpoints}
    rows: list[dict[str, Any]] = []
    for partition in info.partitions:
        checkpoint = by_partition.get(partition.partition)
        if checkpoint is None:
            rows.append({"partition": partition.partition, "offset": None, "scn": None,
                         "epoch": None, "end_offset": partition.end_offset,
                         "lag": partition.end_offset - partition.start_offset,
                         "behind_retention": False})
            continue
        # Lag counts what is still stored after the checkpoint: a checkpoint behind
        # retention cannot be resumed from (the processor fails the partition with
        # CheckpointExpired, or skips past it with offset_reset), so the events
        # retention removed are not "to process" and are said apart.
        next_offset = checkpoint.offset + 1
        behind = next_offset < partition.start_offset
        rows.append({"partition": checkpoint.partition, "offset": checkpoint.offset,
                     "scn": checkpoint.scn, "epoch": checkpoint.epoch,
                     "end_offset": partition.end_offset,
                     "lag": max(0, partition.end_offset - max(next_offset,
                                                              partition.start_offset)),
                     "behind_retention": behind})
    return rows


def _seconds(ms: int | None) -> str:
    return "-" if ms is None else f"{ms / 1000:,.1f} s"


def _owner(row: dict[str, Any]) -> str:
    if row["owner"] is None:
        return "(never claimed)"
    if row["owner"] == "":
        return "(released)"
    if row["expires_in_ms"] is not None and row["expires_in_ms"] < 0:
        return f"{row['owner']} (expired)"
    return str(row["owner"])


def ownership_table(title: str, rows: list[dict[str, Any]], width: int,
                    wide: bool = False) -> RenderableType:
    """Who owns each partition, laid out for `width` (owner ids never cut)."""
    cells = [(str(row["partition"]), _owner(row), _seconds(row["age_ms"]),
              _seconds(row["expires_in_ms"]), "-" if row["epoch"] is None else str(row["epoch"]))
             for row in rows]
    return fit_table(title, ("partition", "owner", "age", "expires in", "epoch"), cells, width,
                     wide, numeric_from=2)


def checkpoints_table(title: str, rows: list[dict[str, Any]], width: int,
                      wide: bool = False) -> RenderableType:
    """Each partition's checkpoint and its lag, laid out for `width`."""
    cells = [(str(row["partition"]), *("-" if row[k] is None else f"{row[k]}"
                                       for k in ("offset", "scn", "epoch")),
              f"{row['lag']:,}" + (" (behind retention)" if row["behind_retention"] else ""))
             for row in rows]
    return fit_table(title, ("partition", "offset", "scn", "epoch", "lag"), cells, width, wide)
