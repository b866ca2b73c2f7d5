"""Leases: when this processor stops treating a claim as its own.

Pure (no I/O, no clock): times are milliseconds on the caller's monotonic
clock, `now_ms` an argument. Rules:

1. A claim is held from when its claim (or its last renewal) was *sent*,
   `renewed_at_ms`, and lapses once `now_ms > renewed_at_ms + expiration_ms`:
   the strict comparison of `balancer.is_live`. Counting from the send, not
   from the answer, is the safe side: the store stamps `last_modified_ms` at
   or after the send, so (with clocks that agree) the holder lets go no later
   than any other processor may judge the record expired and take it.
2. A lapsed claim is not owned, whatever happens next: the processor closes
   its partition ("ownership_lost") at once, event or not, and reopens it
   from the checkpoint only after a claim it wins again. Event Hubs treats an
   expired ownership the same way.
3. A claim whose lease has lapsed by the time its answer arrives (the call
   took longer than the expiration) is not opened: the next cycle renews it.

Must not know: the stores, pumps, readers or which clock the caller reads.
"""

from __future__ import annotations

from collections.abc import Mapping


def lease_lapsed(renewed_at_ms: int, expiration_ms: int, now_ms: int) -> bool:
    """Whether a claim sent at `renewed_at_ms` has lapsed at `now_ms` (rule 1)."""
    assert expiration_ms > 0
    return now_ms > renewed_at_ms + expiration_ms


def lapsed_partitions(renewals: Mapping[int, int], expiration_ms: int, now_ms: int
                      ) -> tuple[int, ...]:
    """The partitions whose claim has lapsed at `now_ms`, in order.

    Args:
        renewals: partition -> when its claim was last sent (renewed_at_ms),
            for the partitions this processor treats as owned.
    """
    return tuple(sorted(p for p, renewed_at_ms in renewals.items()
                        if lease_lapsed(renewed_at_ms, expiration_ms, now_ms)))


def next_lapse_ms(renewals: Mapping[int, int], expiration_ms: int) -> int | None:
    """The first millisecond at which one of `renewals` counts as lapsed
    (None: nothing held); a watcher sleeps until then."""
    if not renewals:
        return None
    return min(renewals.values()) + expiration_ms + 1
