"""The two records the stores keep, as the Event Hubs proposal draws them.

`PartitionOwnership` is load-balancing data (high frequency, needs a
conditional write); `Checkpoint` is the application's progress (written
unconditionally, last writer wins). They share no field beyond the partition's
identity, so each can live in a store of its own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PartitionOwnership:
    """Who processes one partition for one consumer group.

    Attributes:
        namespace: groups deployments that share a store (Event Hubs'
            fully qualified namespace); any string, "" allowed.
        topic: the topic.
        consumer_group: the processors' group name.
        partition: the partition number.
        owner_id: the processor that owns it; "" = released (claimable).
        etag: the store's version of the record. A claim passes the etag it
            listed; None claims a partition no record exists for yet. The
            store sets a new etag on every successful claim.
        last_modified_ms: when the store last wrote the record (ms since the
            epoch, the store's clock); set by the store.
        epoch: increases with every claim that changes the owner (set by the
            store); a checkpoint written under an older epoch can be refused
            (fencing a paused ex-owner).
    """

    namespace: str
    topic: str
    consumer_group: str
    partition: int
    owner_id: str
    etag: str | None = None
    last_modified_ms: int = 0
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where one consumer group has processed one partition up to.

    Attributes:
        namespace, topic, consumer_group, partition: as in PartitionOwnership.
        offset: the offset of the last processed event (processing resumes
            at offset + 1).
        scn: that event's SCN (for a Databus consumer: the last whole window).
        epoch: the ownership epoch of the writer (0 = not fenced).
        bootstrap: while a Databus consumer bootstraps this partition, where
            the bootstrap stands (JSON of sdk.bootstrap.BootstrapPosition:
            snapshot by key, catch-up by offset); "" = online (offset, scn).
        incarnation: which topic of this name the offset is of (the broker's
            `TopicInfo.incarnation`, new when a topic is deleted and created
            again); "" = not known (a checkpoint written before it was kept,
            or by a broker that does not say it): such a checkpoint resumes
            as its offset says.
    """

    namespace: str
    topic: str
    consumer_group: str
    partition: int
    offset: int
    scn: int
    epoch: int = 0
    bootstrap: str = ""
    incarnation: str = ""
