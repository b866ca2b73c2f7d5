"""What the broker's event processor stores decide. Pure: no I/O, no clock.

Rules:
1. A claim wins only if its etag matches the stored record's (an empty etag
   wins only where no record exists): an atomic compare-and-set, because the
   store's single task applies claims one at a time (`service.py`).
2. A claim that gives a partition a new owner gets a new epoch, above both
   the record's and the partition's fence, and raises the fence to it. A
   renewal (same owner) keeps its epoch unless the fence has moved past it
   (an epoch registered through another ownership store); a release (owner
   "") keeps it.
3. A checkpoint with epoch 0 is unfenced and always accepted. Otherwise its
   epoch must equal the fence's: older is a stale owner (refused, naming the
   current owner), newer was never registered (refused: a client bug).
4. A fence only rises; one epoch has one owner.

Bad input raises `BrokerError` (the client's fault); nothing here knows
gRPC, RocksDB or the time of day.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.errors import BrokerError
from broker.processor_stores.keys import Fence, Owned
from sdk.core.names import NAME_CHARACTERS, is_name, is_text


@dataclass(frozen=True, slots=True)
class Where:
    """What a refusal names: the topic, partition and consumer group."""

    topic: str
    partition: int
    group: str


@dataclass(frozen=True, slots=True)
class Claim:
    """One requested claim: etag "" = only if no record exists."""

    partition: int
    owner_id: str
    etag: str


@dataclass(frozen=True, slots=True)
class Won:
    """A claim that won: the record to store, and the fence when it rose."""

    owned: Owned
    fence: Fence | None


def check_group(namespace: str, consumer_group: str, bytes_max: int) -> None:
    """Refuse a namespace or consumer group the store cannot key safely."""
    if not is_name(consumer_group, bytes_max):
        raise BrokerError("processor_name_invalid", field="consumer_group", value=consumer_group,
                          allowed=f"use 1..{bytes_max} characters from {NAME_CHARACTERS}")
    _check_text("namespace", namespace, bytes_max, empty_ok=True)


def check_owner_id(owner_id: str, bytes_max: int, empty_ok: bool) -> None:
    _check_text("owner_id", owner_id, bytes_max, empty_ok)


def _check_text(field: str, value: str, bytes_max: int, empty_ok: bool) -> None:
    if not is_text(value, bytes_max, empty_ok):
        low = 0 if empty_ok else 1
        raise BrokerError("processor_name_invalid", field=field, value=value,
                          allowed=f"use {low}..{bytes_max} bytes of printable UTF-8 text")


def check_claims(claims: list[Claim], partitions: int, bytes_max: int) -> None:
    """At most one claim per partition, each in range, each owner id valid."""
    seen: set[int] = set()
    for claim in claims:
        if not 0 <= claim.partition < partitions:
            raise BrokerError("claims_invalid", detail=f"claim for partition {claim.partition} "
                              f"is out of range; allowed 0..{partitions - 1}")
        if claim.partition in seen:
            raise BrokerError("claims_invalid", detail=f"partition {claim.partition} is claimed "
                              "twice in one request; send one claim per partition")
        seen.add(claim.partition)
        check_owner_id(claim.owner_id, bytes_max, empty_ok=True)


def decide_claim(current: Owned | None, fence: Fence | None, claim: Claim,
                 now_ms: int) -> Won | None:
    """The outcome of one claim against the stored record (rules 1 and 2).

    Returns:
        None when the claim lost (its etag no longer matches).
    """
    if claim.etag == "" and current is not None:
        return None
    if claim.etag != "" and (current is None or current.etag != claim.etag):
        return None
    previous_owner = current.owner_id if current is not None else ""
    epoch = current.epoch if current is not None else 0
    fence_epoch = fence.epoch if fence is not None else 0
    new_fence = None
    if claim.owner_id and (claim.owner_id != previous_owner or epoch < fence_epoch):
        epoch = max(epoch, fence_epoch) + 1
        new_fence = Fence(epoch, claim.owner_id)
    version = (current.version if current is not None else 0) + 1
    return Won(Owned(claim.owner_id, version, epoch, now_ms), new_fence)


def check_checkpoint_epoch(fence: Fence | None, epoch: int, where: Where) -> None:
    """Refuse a checkpoint from a stale or unregistered epoch (rule 3)."""
    if epoch == 0:
        return
    current = fence.epoch if fence is not None else 0
    if fence is not None and epoch < current:
        raise BrokerError("checkpoint_fenced", epoch=epoch, topic=where.topic,
                          partition=where.partition, group=where.group, current=current,
                          owner=fence.owner_id)
    if epoch > current:
        raise BrokerError("epoch_unregistered", epoch=epoch, topic=where.topic,
                          partition=where.partition, group=where.group, current=current)


def decide_fence(fence: Fence | None, epoch: int, owner_id: str, where: Where) -> Fence | None:
    """The fence after registering (epoch, owner_id) (rule 4); None = unchanged.

    Raises:
        BrokerError: epoch 0, an epoch older than the fence (a stale owner),
            or the fence's own epoch under another owner.
    """
    if epoch <= 0:
        raise BrokerError("checkpoint_invalid", detail="FenceCheckpoints epoch=0 is invalid; "
                          "register the epoch > 0 that the ownership store gave the claim")
    if fence is None or epoch > fence.epoch:
        return Fence(epoch, owner_id)
    if epoch < fence.epoch:
        raise BrokerError("checkpoint_fenced", epoch=epoch, topic=where.topic,
                          partition=where.partition, group=where.group, current=fence.epoch,
                          owner=fence.owner_id)
    if fence.owner_id != owner_id:
        raise BrokerError("epoch_taken", epoch=epoch, topic=where.topic,
                          partition=where.partition, group=where.group, owner=fence.owner_id,
                          asked=owner_id)
    return None
