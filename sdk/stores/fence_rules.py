"""The fencing rules of an SDK-side checkpoint store (the file store). Pure.

The broker keeps the same rules for its own store (`broker/processor_stores/
rules.py`, rules 3 and 4, with the broker's error catalogue); this copy is for
stores the SDK runs itself, which may not import the broker. Rules:

1. A fence per partition holds the highest ownership epoch registered and
   its owner. It only rises, and one epoch has one owner: registering an
   older epoch, or the fence's epoch under another owner, is refused
   (`OwnershipLost`: another processor owns the partition now).
2. A checkpoint with epoch 0 is unfenced and always accepted. Otherwise its
   epoch must equal the fence's: older is a superseded owner (`OwnershipLost`,
   naming the current owner; nothing is written), newer was never registered
   (`FailedPrecondition`: a client bug, not a lost partition).

Why a checkpoint needs rule 2 in the store and not only the processor's own
check: a write already under way when the writer's claim lapses reaches the
store whatever the writer learns later. The store decides it against the
fence under the same lock as the new owner's registration, and the new owner
registers before it reads its checkpoint, so a late write is either read by
the new owner (it started from it) or refused; it never lands after.

Must not know: files, locks, clocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdk.errors import FailedPrecondition, InvalidArgument
from sdk.stores.fencing import OwnershipLost


@dataclass(frozen=True, slots=True)
class Fence:
    """The highest epoch registered for a partition, and whose it is."""

    epoch: int
    owner_id: str


def check_checkpoint_epoch(fence: Fence | None, epoch: int, where: str) -> None:
    """Refuse a checkpoint from a superseded or unregistered epoch (rule 2).

    Args:
        where: names the partition in messages, e.g. "'orders'/3 in group 'billing'".
    Raises:
        OwnershipLost: epoch is older than the fence's (names the current owner).
        FailedPrecondition: epoch was never registered.
    """
    if epoch == 0:
        return
    current = fence.epoch if fence is not None else 0
    if fence is not None and epoch < current:
        raise OwnershipLost(f"ownership epoch {epoch} of {where} is older than epoch {current} "
                            f"of the current owner {fence.owner_id!r}: this processor lost the "
                            "partition and must stop processing it (nothing was written)")
    if epoch > current:
        raise FailedPrecondition(f"ownership epoch {epoch} of {where} was never registered (the "
                                 f"highest is {current}); call fence() first, or write epoch 0 "
                                 "(unfenced)")


def decide_fence(fence: Fence | None, epoch: int, owner_id: str, where: str) -> Fence | None:
    """The fence after registering (epoch, owner_id) (rule 1); None = unchanged.

    Raises:
        InvalidArgument: epoch <= 0 or an empty owner_id.
        OwnershipLost: an older epoch, or the fence's epoch under another owner.
    """
    if epoch <= 0 or not owner_id:
        raise InvalidArgument(f"fence of {where}: epoch={epoch}, owner_id={owner_id!r} is "
                              "invalid; register the epoch > 0 the ownership store gave the "
                              "claim, with its owner id")
    if fence is None or epoch > fence.epoch:
        return Fence(epoch, owner_id)
    if epoch < fence.epoch:
        raise OwnershipLost(f"ownership epoch {epoch} of {where} is older than epoch "
                            f"{fence.epoch} of the current owner {fence.owner_id!r}: this "
                            "processor lost the partition")
    if fence.owner_id != owner_id:
        raise OwnershipLost(f"ownership epoch {epoch} of {where} is registered to owner "
                            f"{fence.owner_id!r}, not {owner_id!r}; an epoch has one owner")
    return None
