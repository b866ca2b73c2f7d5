"""Which ownership records this processor instance wrote itself: how it
tells that another running instance uses the same owner_id.

Two processors with one owner_id look like one owner to the balancer: each
renews the other's records and both process every partition, for ever. The
store keeps no more than the owner_id, but each instance knows what it
wrote: the etag and last_modified_ms of its last winning claim of each
partition. A listed record under its own owner_id with another etag and a
later last_modified_ms was written by someone else under its id.

Rules (why no false alarm):
1. Only partitions this instance has written are judged. A record under its
   id that it never wrote (a previous run of the same id, just restarted) is
   adopted, as Event Hubs does.
2. A claim call that failed may still have been applied (a lost answer),
   and a claim that lost its compare-and-set may have lost to its own
   earlier attempt (a client library resending it): what was known of
   those partitions is forgotten (`unsure`), so a write of its own it never
   heard of is adopted, not reported. (The other instance, whose write made
   the claim lose, still sees this one's next write.)
3. Only a write *after* its own counts: a store that went back (a broker
   restarted before a renewal was fsynced, a Redis restored from a snapshot)
   shows an older record, which is no sign of another writer.

Pure: no I/O, no clock (last_modified_ms is the store's).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sdk.errors import FailedPrecondition
from sdk.stores.records import PartitionOwnership


class DuplicateOwnerId(FailedPrecondition):
    """Another running processor uses this processor's owner_id (a
    configuration error: each running processor needs its own id)."""


@dataclass(frozen=True, slots=True)
class Written:
    """This instance's last winning claim of one partition, as the store returned it."""

    etag: str | None
    last_modified_ms: int


class OwnWrites:
    """The last record this instance wrote per partition (see the module docstring)."""

    def __init__(self, owner_id: str) -> None:
        self.owner_id = owner_id
        self._last: dict[int, Written] = {}

    def wrote(self, won: Iterable[PartitionOwnership]) -> None:
        """Claims this instance won: it wrote these records."""
        for record in won:
            self._last[record.partition] = Written(record.etag, record.last_modified_ms)

    def unsure(self, partitions: Iterable[int]) -> None:
        """A claim call failed, or these claims lost (rule 2): this instance
        may have written these partitions without hearing of it."""
        for partition in partitions:
            self._last.pop(partition, None)

    def check(self, listed: Iterable[PartitionOwnership]) -> DuplicateOwnerId | None:
        """The error to report when a record under this owner_id was written
        by another writer after this instance's own last write of the
        partition (rules 1 and 3); None when there is none."""
        for record in listed:
            mine = self._last.get(record.partition)
            if (mine is not None and record.owner_id == self.owner_id
                    and record.etag != mine.etag
                    and record.last_modified_ms > mine.last_modified_ms):
                return DuplicateOwnerId(
                    f"owner_id {self.owner_id!r} is used by another running processor: "
                    f"partition {record.partition} of {record.topic!r} for group "
                    f"{record.consumer_group!r} was claimed under it by another writer (its "
                    f"record is from {record.last_modified_ms} ms, this processor's own last "
                    f"claim from {mine.last_modified_ms} ms). Each running processor needs its "
                    "own owner_id (leave it None for a new UUID); this one stopped processing "
                    "and balancing")
        return None
