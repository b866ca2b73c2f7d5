"""Event processor: processors of one consumer group balance a topic's
partitions among themselves (Event Hubs' algorithm) and resume each from its
checkpoint. Ownership and checkpoints are two separate stores (`sdk.stores`).

`balancer.py` is the pure core; `processor.py` the async shell, `sync.py`
its blocking face; `pump.py` runs one owned partition; `context.py` is what
callbacks see; `metrics.py` what is counted; `arguments.py` what is
refused at construction; `own_writes.py` how an instance tells that another
uses its owner_id; `offset_reset.py` where a partition whose checkpoint is
behind the log's start, past its end or of another incarnation of the topic
resumes; `release.py` how a stopping
processor gives its partitions back.
"""

from sdk.processor.balancer import Plan, plan_claims
from sdk.processor.context import CloseReason, PartitionContext
from sdk.processor.metrics import ProcessorStats
from sdk.processor.offset_reset import (
    CheckpointExpired,
    CheckpointOtherIncarnation,
    CheckpointPastEnd,
    CheckpointReset,
)
from sdk.processor.own_writes import DuplicateOwnerId
from sdk.processor.processor import EventProcessor
from sdk.processor.sync import SyncEventProcessor, SyncPartitionContext

__all__ = [
    "CheckpointExpired", "CheckpointOtherIncarnation", "CheckpointPastEnd", "CheckpointReset", "CloseReason",
    "DuplicateOwnerId", "EventProcessor",
    "PartitionContext", "Plan", "ProcessorStats",
    "SyncEventProcessor", "SyncPartitionContext", "plan_claims",
]
