"""Ownership and checkpoint stores: the event processor's two separate stores.

Two small interfaces (`OwnershipStore`, `CheckpointStore`) with the records of
the Event Hubs proposal "separate ownership and checkpoint stores"
(`PartitionOwnership`, `Checkpoint`). Either store works without the other:
the event processor balances partitions through an `OwnershipStore` and
resumes from a `CheckpointStore`; the Databus callback consumer keeps its
whole-window checkpoints in a `CheckpointStore` alone.

Implementations: the broker (`BrokerOwnershipStore`, `BrokerCheckpointStore`,
the default for both, with fencing), Redis for ownership
(`RedisOwnershipStore`, needs `keybus[redis]`), and a directory of JSON files
for checkpoints (`FileCheckpointStore`, with fencing on one machine).
"""

from sdk.stores.broker_stores import BrokerCheckpointStore, BrokerOwnershipStore
from sdk.stores.fencing import FencingCheckpointStore, OwnershipLost
from sdk.stores.file_checkpoints import FileCheckpointStore
from sdk.stores.protocols import CheckpointStore, OwnershipStore
from sdk.stores.records import Checkpoint, PartitionOwnership
from sdk.stores.redis_ownership import RedisOwnershipStore

__all__ = [
    "BrokerCheckpointStore",
    "BrokerOwnershipStore",
    "Checkpoint",
    "CheckpointStore",
    "FencingCheckpointStore",
    "FileCheckpointStore",
    "OwnershipLost",
    "OwnershipStore",
    "PartitionOwnership",
    "RedisOwnershipStore",
]
