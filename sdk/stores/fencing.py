"""Fencing: how a checkpoint store refuses a stale owner (beyond Event Hubs).

Every claim that changes a partition's owner carries a higher ownership
epoch (`PartitionOwnership.epoch`). A processor writes its epoch into every
checkpoint. A store that fences (`supports_fencing = True`: the broker's,
the file store) keeps the highest epoch registered per partition and refuses a
checkpoint from an older one with `OwnershipLost`, naming the current owner:
a processor that was paused past its ownership's expiration cannot move the
checkpoint after another took the partition.

How the epoch reaches the checkpoint store: a processor that wins a
partition registers (`fence`) the epoch before it reads the checkpoint. With
the broker holding ownership too, the claim itself registers it (in the same
write); with ownership in Redis, the registration is what tells the broker.
Epoch 0 means unfenced: always accepted (a processor with fencing off).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sdk.errors import FailedPrecondition
from sdk.stores.protocols import CheckpointStore


class OwnershipLost(FailedPrecondition):
    """This processor no longer owns the partition: another claimed it (the
    checkpoint store refused an older epoch) or its claim lapsed. Nothing was
    written; stop processing the partition."""


@runtime_checkable
class FencingCheckpointStore(CheckpointStore, Protocol):
    """A CheckpointStore that refuses checkpoints from superseded owners."""

    supports_fencing: bool

    async def fence(self, namespace: str, topic: str, consumer_group: str, partition: int,
                    epoch: int, owner_id: str) -> None:
        """Register the epoch `owner_id` won for the partition.

        Raises:
            OwnershipLost: a newer epoch is registered already (another
                processor owns the partition now).
        """
        ...


def fences(store: object) -> bool:
    """Whether a checkpoint store can fence (says so with supports_fencing)."""
    return bool(getattr(store, "supports_fencing", False)) and isinstance(
        store, FencingCheckpointStore)
