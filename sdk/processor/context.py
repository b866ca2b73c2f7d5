"""PartitionContext: what the callbacks know about one owned partition, and
how they checkpoint it.

One context per partition claim: a new claim (a new epoch) gets a new
context. It runs on the processor's event loop.
"""

from __future__ import annotations

import time
from typing import Literal

from sdk.core.columns import Event
from sdk.processor.leases import lease_lapsed
from sdk.processor.metrics import ProcessorMetrics
from sdk.processor.offset_reset import CheckpointReset
from sdk.reader import ReadBatch
from sdk.stores.fencing import OwnershipLost
from sdk.stores.protocols import CheckpointStore
from sdk.stores.records import Checkpoint, PartitionOwnership

CloseReason = Literal["shutdown", "ownership_lost", "error"]


def monotonic_ms() -> int:
    """This machine's monotonic clock in ms: the clock leases are counted on."""
    return time.monotonic_ns() // 1_000_000


class PartitionContext:
    """One owned partition, as the processor's callbacks see it.

    Attributes:
        namespace, topic, consumer_group, partition: which partition.
        owner_id: this processor's id.
        epoch: the ownership epoch of this claim (written into checkpoints
            when fencing is on).
        checkpoint: the last checkpoint read or written (None: none yet).
        checkpoint_reset: set before on_partition_initialize when the
            checkpoint read was behind the log's start or past its end and
            `offset_reset` moved the partition on ("earliest" or "latest": where it
            resumed, how many events were skipped); None otherwise. The
            stored checkpoint stays until the application checkpoints again.
        end_offset: the log's end when the last batch was read (for lag).
        close_reason: None while open; then "shutdown", "ownership_lost" or "error".
        renewed_at_ms: when the claim was last sent (monotonic_ms()); the
            claim lapses `expiration_ms` later unless renewed (leases.py).
        incarnation: the topic's incarnation when the partition was claimed
            (the cycle's description; "" = not known), written into every
            checkpoint, so a checkpoint of a topic since deleted and created
            again is told from one of this topic.
    """

    def __init__(self, ownership: PartitionOwnership, checkpoint_store: CheckpointStore,
                 fencing: bool, metrics: ProcessorMetrics, expiration_ms: int,
                 renewed_at_ms: int, incarnation: str = "") -> None:
        self.namespace = ownership.namespace
        self.topic = ownership.topic
        self.consumer_group = ownership.consumer_group
        self.partition = ownership.partition
        self.owner_id = ownership.owner_id
        self.ownership = ownership
        self.incarnation = incarnation
        self.checkpoint: Checkpoint | None = None
        self.checkpoint_reset: CheckpointReset | None = None
        self.end_offset: int | None = None
        self.close_reason: CloseReason | None = None
        self.last_batch: ReadBatch | None = None
        self._store = checkpoint_store
        self._fencing = fencing
        self._metrics = metrics
        self.expiration_ms = expiration_ms
        self.renewed_at_ms = renewed_at_ms
        self._disowned = False  # the processor stopped the pump: another may own it now
        self._lag_from: int | None = None  # first offset not checkpointed by this claim

    @property
    def epoch(self) -> int:
        return self.ownership.epoch

    @property
    def lost(self) -> bool:
        return self.close_reason == "ownership_lost"

    def renewed(self, ownership: PartitionOwnership, claimed_at_ms: int) -> None:
        """The processor renewed the claim (sent at `claimed_at_ms`, monotonic_ms())."""
        self.ownership = ownership
        self.renewed_at_ms = claimed_at_ms

    def disown(self) -> None:
        """The processor no longer owns the partition (its claim lapsed or a cycle
        found it lost) while a callback may still run: that callback's checkpoints
        are refused from now on (`update_checkpoint`)."""
        self._disowned = True

    def batch_read(self, batch: ReadBatch, end_offset: int | None) -> None:
        """The pump read `batch`, the log ending at `end_offset` (runs before
        on_event). The checkpoint lag moves with every batch read, not only
        with a checkpoint: a partition whose callback stopped checkpointing
        (it fails, or never checkpoints) shows its lag growing with the log,
        as a Kafka group's lag grows while it commits nothing. Without a
        checkpoint of this claim yet, the lag counts from the first offset read."""
        self.last_batch = batch
        self.end_offset = end_offset
        if self._lag_from is None:
            self._lag_from = batch.offsets[0] if batch.count else batch.next_offset
        if end_offset is not None:
            self._metrics.lag(self.partition, max(0, end_offset - self._lag_from))

    def closed(self, reason: CloseReason) -> None:
        """The pump closed the partition; lost, its lag is no longer this processor's."""
        self.close_reason = reason
        if reason == "ownership_lost":
            self._metrics.forget_lag(self.partition)

    def lease_lapsed(self, now_ms: int) -> bool:
        """Whether the claim may have expired in the store at `now_ms`
        (monotonic_ms(); counted from when the renewal was sent)."""
        return lease_lapsed(self.renewed_at_ms, self.expiration_ms, now_ms)

    async def update_checkpoint(self, event: Event | ReadBatch | None = None) -> Checkpoint:
        """Record that processing got up to `event` (default: the last event of
        the last batch delivered); a new owner resumes after it.

        Args:
            event: an Event (its offset and scn), a ReadBatch (its last event)
                or None.
        Returns:
            The checkpoint stored.
        Raises:
            OwnershipLost: this processor no longer owns the partition by its
                own knowledge (the claim lapsed by its clock, a cycle found it
                lost, or it was closed as lost), or the store refused a stale
                epoch; nothing was written (as Kafka's CommitFailedException),
                so a new owner's checkpoint is never moved back. The partition
                closes as lost before the next batch.
            ValueError: nothing delivered yet and no event given, or an
                event of another partition (or topic) than this context's.
        """
        offset, scn = self._position(event)
        why = self._not_owned(monotonic_ms())
        if why is not None:
            self._metrics.checkpoint_refused()
            raise OwnershipLost(f"{self.topic}/{self.partition} of group {self.consumer_group!r} "
                                f"{why}; the checkpoint (offset {offset}) was not written")
        checkpoint = Checkpoint(self.namespace, self.topic, self.consumer_group, self.partition,
                                offset, scn, self.epoch if self._fencing else 0,
                                incarnation=self.incarnation)
        try:
            await self._store.update_checkpoint(checkpoint)
        except OwnershipLost:
            self.close_reason = "ownership_lost"
            self._metrics.checkpoint_refused()
            raise
        self.checkpoint = checkpoint
        self._lag_from = offset + 1
        end = self.end_offset if self.end_offset is not None else offset + 1
        self._metrics.checkpoint(self.partition, max(0, end - offset - 1))
        return checkpoint

    def _not_owned(self, now_ms: int) -> str | None:
        """Why this processor may not checkpoint the partition now, or None. The
        lease is looked at here too: a callback that blocks the event loop also
        keeps the processor's watch from closing the partition."""
        if self.lost:
            return "was closed as lost"
        if self.lease_lapsed(now_ms):
            return (f"is no longer owned by {self.owner_id!r}: its claim lapsed (not renewed "
                    f"within ownership_expiration_ms={self.expiration_ms})")
        if self._disowned:
            return f"is no longer owned by {self.owner_id!r} (another processor may own it)"
        return None

    def _position(self, event: Event | ReadBatch | None) -> tuple[int, int]:
        if event is None:
            if self.last_batch is None:
                raise ValueError(f"nothing was delivered from {self.topic}/{self.partition} "
                                 "yet; pass the event to checkpoint")
            event = self.last_batch
        self._check_same_partition(event)
        if isinstance(event, ReadBatch):
            return event.offsets[-1], event.scns()[-1]
        if event.offset < 0:
            raise ValueError(f"event {event!r} has no offset; checkpoint an event the "
                             "processor delivered")
        return event.offset, event.scn

    def _check_same_partition(self, event: Event | ReadBatch) -> None:
        """Refuse another partition's event: its offset stored as this
        partition's checkpoint would make the next owner skip events."""
        topic = event.record.topic if isinstance(event, ReadBatch) else event.topic
        if event.partition != self.partition or (topic and topic != self.topic):
            raise ValueError(f"the event to checkpoint is from {topic or self.topic}/"
                             f"{event.partition}, but this context is {self.topic}/"
                             f"{self.partition}; checkpoint each partition with its own "
                             "context")

    def __repr__(self) -> str:
        return (f"PartitionContext({self.topic}/{self.partition}, group={self.consumer_group!r}, "
                f"owner={self.owner_id!r}, epoch={self.epoch})")
