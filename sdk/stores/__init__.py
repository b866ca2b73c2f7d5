"""Ownership and checkpoint stores: the event processor's two separate stores.

Two small interfaces (`OwnershipStore`, `CheckpointStore`) with the records of
the Event Hubs proposal "separate ownership and checkpoint stores"
(`PartitionOwnership`, `Checkpoint`). Either store works without the other:
the event processor balances partitions through an `OwnershipStore` and
resumes from a `CheckpointStore`; the Databus callback consumer keeps its
whole-window checkpoints in a `CheckpointStore` alone.
"""

from sdk.stores.file_checkpoints import FileCheckpointStore
from sdk.stores.protocols import CheckpointStore, OwnershipStore
from sdk.stores.records import Checkpoint, PartitionOwnership

__all__ = [
    "Checkpoint",
    "CheckpointStore",
    "FileCheckpointStore",
    "OwnershipStore",
    "PartitionOwnership",
]
