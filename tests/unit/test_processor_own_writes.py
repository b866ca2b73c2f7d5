"""OwnWrites (sdk/processor/own_writes.py): telling that another running
instance claims under this processor's owner_id, without false alarms.

Goal: a record under its own id that another writer wrote after this
instance's last write is reported, naming the id and the partition; a record
it never wrote (a previous run, adopted), its own writes, a store gone back
to an older record, and a claim call whose answer was lost are not.
Method: the pure class, records as the stores return them (etag and the
store's last_modified_ms).
"""

from __future__ import annotations

from sdk.processor.own_writes import DuplicateOwnerId, OwnWrites
from sdk.stores import PartitionOwnership


def record(partition: int, owner: str, etag: str, modified_ms: int) -> PartitionOwnership:
    return PartitionOwnership("", "orders", "billing", partition, owner, etag, modified_ms, 7)


def test_another_writer_under_the_same_id_is_reported() -> None:
    writes = OwnWrites("worker-a")
    writes.wrote([record(0, "worker-a", "e1", 1_000), record(1, "worker-a", "f1", 1_000)])
    assert writes.check([record(0, "worker-a", "e1", 1_000),
                         record(1, "worker-a", "f1", 1_000)]) is None
    error = writes.check([record(0, "worker-a", "e1", 1_000), record(1, "worker-a", "f2", 1_400)])
    assert isinstance(error, DuplicateOwnerId)
    assert "owner_id 'worker-a' is used by another running processor: partition 1 of " \
        "'orders' for group 'billing'" in str(error)
    assert "leave it None for a new UUID" in str(error)


def test_records_it_never_wrote_are_adopted() -> None:
    """A restarted process with a stable id finds its previous run's records."""
    writes = OwnWrites("worker-a")
    assert writes.check([record(0, "worker-a", "old", 5_000)]) is None
    writes.wrote([record(0, "worker-a", "e1", 6_000)])
    assert writes.check([record(0, "worker-a", "e1", 6_000)]) is None


def test_other_owners_and_a_store_gone_back_are_no_sign() -> None:
    writes = OwnWrites("worker-a")
    writes.wrote([record(0, "worker-a", "e2", 2_000)])
    assert writes.check([record(0, "worker-b", "x", 3_000)]) is None  # stolen: not our id
    assert writes.check([record(0, "", "x", 3_000)]) is None  # released
    assert writes.check([record(0, "worker-a", "e1", 1_000)]) is None  # restored from before


def test_a_claim_whose_answer_was_lost_is_forgotten() -> None:
    writes = OwnWrites("worker-a")
    writes.wrote([record(0, "worker-a", "e1", 1_000), record(1, "worker-a", "f1", 1_000)])
    writes.unsure([0])  # the claim call failed or lost: the store may have applied it
    assert writes.check([record(0, "worker-a", "e2", 1_500)]) is None
    assert isinstance(writes.check([record(1, "worker-a", "f2", 1_500)]), DuplicateOwnerId)

