"""The broker as ownership store and checkpoint store (the default for both).

Each store is a thin client of the broker's processor store RPCs
(ListOwnership, ClaimOwnership, ListCheckpoints, UpdateCheckpoint,
FenceCheckpoints). The broker does the compare-and-set on the etag in one
task (atomic), fsyncs checkpoints like produce, and fences stale owners. The
two stores may share one channel; either works without the other (e.g.
ownership in Redis, checkpoints here).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sdk import errors
from sdk.admin import AdminClient
from sdk.core.pb import keybus_pb2 as pb
from sdk.stores.fencing import OwnershipLost
from sdk.stores.records import Checkpoint, PartitionOwnership

_LOST_MARKS = ("lost the partition", "an epoch has one owner")


def _ownership(record: pb.OwnershipRecord) -> PartitionOwnership:
    return PartitionOwnership(record.namespace, record.topic, record.consumer_group,
                              record.partition, record.owner_id, record.etag or None,
                              record.last_modified_ms, record.epoch)


def _checkpoint(record: pb.CheckpointRecord) -> Checkpoint:
    return Checkpoint(record.namespace, record.topic, record.consumer_group, record.partition,
                      record.offset, record.scn, record.epoch, record.bootstrap,
                      record.incarnation)


def _lost_or_same(error: errors.KeybusError) -> errors.KeybusError:
    """A fencing refusal as OwnershipLost; any other error unchanged."""
    if isinstance(error, errors.FailedPrecondition) and any(
            mark in error.message for mark in _LOST_MARKS):
        return OwnershipLost(error.message, error.code)
    return error


class BrokerOwnershipStore(AdminClient):
    """`OwnershipStore` kept by the broker (arguments as AdminClient)."""

    async def list_ownership(self, namespace: str, topic: str,
                             consumer_group: str) -> list[PartitionOwnership]:
        """Every ownership record of the group, by partition.

        Raises:
            TopicNotFound, InvalidArgument (a bad group name), Unavailable.
        """
        response = await self._call("ListOwnership", pb.ListOwnershipRequest(
            namespace=namespace, topic=topic, consumer_group=consumer_group))
        return [_ownership(r) for r in response.ownership]

    async def claim_ownership(self, claims: Sequence[PartitionOwnership]
                              ) -> list[PartitionOwnership]:
        """Compare-and-set each claim on its etag; returns the ones that won.

        Claims of several groups go out as one request per group.

        Raises:
            InvalidArgument (two claims for one partition, a bad owner id),
            TopicNotFound, Unavailable.
        """
        by_group: dict[tuple[str, str, str], list[pb.OwnershipClaim]] = defaultdict(list)
        for claim in claims:
            by_group[(claim.namespace, claim.topic, claim.consumer_group)].append(
                pb.OwnershipClaim(partition=claim.partition, owner_id=claim.owner_id,
                                  etag=claim.etag or ""))
        won: list[PartitionOwnership] = []
        for (namespace, topic, consumer_group), group_claims in by_group.items():
            response = await self._call("ClaimOwnership", pb.ClaimOwnershipRequest(
                namespace=namespace, topic=topic, consumer_group=consumer_group,
                claims=group_claims))
            won.extend(_ownership(r) for r in response.won)
        return won


class BrokerCheckpointStore(AdminClient):
    """`CheckpointStore` kept by the broker, with fencing (arguments as AdminClient)."""

    supports_fencing = True

    async def list_checkpoints(self, namespace: str, topic: str,
                               consumer_group: str) -> list[Checkpoint]:
        """Every checkpoint of the group, by partition.

        Raises:
            TopicNotFound, InvalidArgument, Unavailable.
        """
        response = await self._call("ListCheckpoints", pb.ListCheckpointsRequest(
            namespace=namespace, topic=topic, consumer_group=consumer_group))
        return [_checkpoint(r) for r in response.checkpoints]

    async def get_checkpoint(self, namespace: str, topic: str, consumer_group: str,
                             partition: int) -> Checkpoint | None:
        """One partition's checkpoint (only that one travels), or None.

        Raises:
            TopicNotFound, InvalidArgument (a partition the topic lacks), Unavailable.
        """
        response = await self._call("ListCheckpoints", pb.ListCheckpointsRequest(
            namespace=namespace, topic=topic, consumer_group=consumer_group,
            partitions=[partition]))
        found = [_checkpoint(r) for r in response.checkpoints if r.partition == partition]
        return found[0] if found else None

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Store the checkpoint, fsynced by the broker before it answers.

        Raises:
            OwnershipLost: checkpoint.epoch is older than the partition's
                current owner's (the message names the owner).
            FailedPrecondition: an epoch never registered.
            InvalidArgument: an offset that is not in the log.
            FailedPrecondition: checkpoint.incarnation is not the topic's (it was
                deleted and created again since the writer read it).
            InvalidArgument: a partition, offset, SCN or epoch below 0 or past its
                field (sent nowhere).
        """
        _check_numbers(checkpoint)
        record = pb.CheckpointRecord(
            namespace=checkpoint.namespace, topic=checkpoint.topic,
            consumer_group=checkpoint.consumer_group, partition=checkpoint.partition,
            offset=checkpoint.offset, scn=checkpoint.scn, epoch=checkpoint.epoch,
            bootstrap=checkpoint.bootstrap, incarnation=checkpoint.incarnation)
        try:
            await self._call("UpdateCheckpoint", pb.UpdateCheckpointRequest(checkpoint=record))
        except errors.KeybusError as e:
            raise _lost_or_same(e) from None

    async def fence(self, namespace: str, topic: str, consumer_group: str, partition: int,
                    epoch: int, owner_id: str) -> None:
        """Register an ownership epoch won in any ownership store (see fencing.py).

        Raises:
            OwnershipLost: a newer epoch is registered (another owner).
        """
        try:
            await self._call("FenceCheckpoints", pb.FenceCheckpointsRequest(
                namespace=namespace, topic=topic, consumer_group=consumer_group,
                partition=partition, epoch=epoch, owner_id=owner_id))
        except errors.KeybusError as e:
            raise _lost_or_same(e) from None


# The record's unsigned fields and their bits (proto/keybus.proto, CheckpointRecord).
_UNSIGNED_BITS = {"partition": 32, "offset": 64, "scn": 64, "epoch": 64}


def _check_numbers(checkpoint: Checkpoint) -> None:
    """Refuse a number the record cannot hold in the caller's words: protobuf would
    raise a bare `ValueError: Value out of range: -1` naming no field.

    Raises:
        InvalidArgument: naming the field, its value and what is allowed.
    """
    for name, bits in _UNSIGNED_BITS.items():
        value = getattr(checkpoint, name)
        if not 0 <= value < 1 << bits:
            raise errors.InvalidArgument(
                f"checkpoint {name} {value} is invalid: allowed 0..{(1 << bits) - 1} "
                f"(partition {checkpoint.partition} of topic {checkpoint.topic!r}, consumer "
                f"group {checkpoint.consumer_group!r}); nothing was stored")
