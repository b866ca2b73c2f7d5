"""The two store interfaces. Implementations: the broker (both), Redis
(ownership), a directory of JSON files (checkpoints).

Every method is async; a store's errors are `sdk.errors` exceptions (or the
store's own documented ones), never a silent success.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from sdk.stores.records import Checkpoint, PartitionOwnership


@runtime_checkable
class OwnershipStore(Protocol):
    """Partition ownership with optimistic concurrency (compare-and-set on the etag).

    A store whose records expire by themselves (Redis) says after how long
    with an int attribute `ttl_ms`; EventProcessor refuses one shorter than
    its ownership_expiration_ms (a record gone early lets a second processor
    take a partition its owner still processes).
    """

    async def list_ownership(self, namespace: str, topic: str,
                             consumer_group: str) -> list[PartitionOwnership]:
        """Every ownership record of the group (released ones included)."""
        ...

    async def claim_ownership(self, claims: Sequence[PartitionOwnership]
                              ) -> list[PartitionOwnership]:
        """Write each claim only if its etag still matches (None: only if no record exists).

        Returns:
            the claims that won, as stored (new etag, last_modified_ms, epoch);
            a claim that lost a race is left out, never raised.
        """
        ...


@runtime_checkable
class CheckpointStore(Protocol):
    """Checkpoints, written unconditionally (no etag: last writer wins)."""

    async def list_checkpoints(self, namespace: str, topic: str,
                               consumer_group: str) -> list[Checkpoint]:
        """Every checkpoint of the group."""
        ...

    async def get_checkpoint(self, namespace: str, topic: str, consumer_group: str,
                             partition: int) -> Checkpoint | None:
        """One partition's checkpoint, or None: what a processor reads on claiming it."""
        ...

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Store the checkpoint durably before returning."""
        ...
