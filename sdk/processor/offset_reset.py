"""Where a partition resumes when retention removed what follows its checkpoint.

A checkpoint at offset c resumes at c + 1. When retention has removed c + 1
(the log now starts past it), those events are gone: the group never
processed them and never will. Kafka's `auto.offset.reset` decides this case
(and the case of no committed offset, which the processor's `start` covers);
Event Hubs' processors have no such option (they pass the checkpoint to the
service). The processor's `offset_reset` does it here:

- "fail" (the default): the partition does not start. Its `starting` step
  fails with `CheckpointExpired` naming the checkpoint, the log's start, how
  many events are gone and the two ways on; it fails again every cycle until
  someone moves the checkpoint or picks a reset. Silently skipping data is
  the one outcome an operator cannot undo or even notice later, so it must
  be asked for (as Spark's `failOnDataLoss` defaults to true, and Keybus's
  reads end with OUT_OF_RANGE instead of skipping);
- "earliest": resume at the log's start (everything still stored is
  processed; only what retention removed is skipped);
- "latest": resume at the log's end when the partition's reader opens (what
  is still stored is skipped too, as a `start="latest"`).

Rules: a checkpoint is expired only when c + 1 < the log's start. A checkpoint
at or past the start resumes as always (past the end is no retention's doing:
the read reports it). Without a known log start (None) nothing is decided
here and the read says what it finds. Pure: the log's start is an argument
(the processor's cycle reads it with the topic's description just before it
claims); no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sdk.errors import OffsetOutOfRange

OffsetReset = Literal["fail", "earliest", "latest"]
OFFSET_RESETS: tuple[OffsetReset, ...] = ("fail", "earliest", "latest")
ResumeAt = int | Literal["latest"]  # an offset, or the log end when the reader opens


class CheckpointExpired(OffsetOutOfRange):
    """A partition's checkpoint is behind the log's start and `offset_reset`
    is "fail": the partition does not start (a configuration decision, not a
    fault that retrying mends)."""


@dataclass(frozen=True, slots=True)
class CheckpointReset:
    """A partition resumed elsewhere than after its checkpoint
    (`PartitionContext.checkpoint_reset`; None when it did not).

    Attributes:
        offset_reset: "earliest" or "latest", the policy applied.
        checkpoint_offset: the expired checkpoint's offset (still the stored
            checkpoint until the application checkpoints again).
        log_start_offset: the first offset the log held.
        resumed_offset: the first offset read now.
    """

    offset_reset: OffsetReset
    checkpoint_offset: int
    log_start_offset: int
    resumed_offset: int

    @property
    def removed(self) -> int:
        """Events after the checkpoint that retention removed."""
        return self.log_start_offset - self.checkpoint_offset - 1

    @property
    def skipped(self) -> int:
        """Events after the checkpoint that will not be processed: the removed
        ones, and for "latest" also those still stored before the log end."""
        return self.resumed_offset - self.checkpoint_offset - 1


def check_offset_reset(value: Any) -> None:
    """Raises ValueError naming what is allowed."""
    if not isinstance(value, str) or value not in OFFSET_RESETS:
        raise ValueError(f"offset_reset={value!r} is invalid; allowed: "
                         f"{', '.join(repr(v) for v in OFFSET_RESETS)} (what a partition whose "
                         "checkpoint is behind the log's start does)")


def resume_at(where: str, checkpoint_offset: int, log_start_offset: int | None,
              offset_reset: OffsetReset) -> ResumeAt:
    """Where a partition with a checkpoint resumes.

    Args:
        where: "topic/partition of group 'g'", for the message.
        checkpoint_offset: the stored checkpoint's offset.
        log_start_offset: the log's first offset (None: unknown, no decision).
        offset_reset: "fail", "earliest" or "latest".
    Returns:
        checkpoint_offset + 1 unless expired; else the log's start
        ("earliest") or "latest".
    Raises:
        CheckpointExpired: expired and offset_reset is "fail".
    """
    resume = checkpoint_offset + 1
    if log_start_offset is None or resume >= log_start_offset:
        return resume
    if offset_reset == "earliest":
        return log_start_offset
    if offset_reset == "latest":
        return "latest"
    assert offset_reset == "fail", offset_reset
    raise CheckpointExpired(
        f"{where}: checkpoint offset {checkpoint_offset} is behind the log's start "
        f"{log_start_offset}: retention removed offsets {resume}..{log_start_offset - 1} "
        f"({log_start_offset - resume} events this group never processed). With "
        "offset_reset='fail' the partition does not start, so nothing is skipped unseen; "
        f"pass offset_reset='earliest' (resume at {log_start_offset}) or 'latest' (resume "
        "at the log end), or move the checkpoint")


def reset_message(where: str, reset: CheckpointReset) -> str:
    """The one WARNING line a reset is said with."""
    passed = reset.skipped - reset.removed
    also = f", {passed} still stored passed over" if passed > 0 else ""
    return (f"{where}: checkpoint offset {reset.checkpoint_offset} is behind the log's start "
            f"{reset.log_start_offset} (retention removed offsets {reset.checkpoint_offset + 1}"
            f"..{reset.log_start_offset - 1}); offset_reset={reset.offset_reset!r}: resuming at "
            f"offset {reset.resumed_offset}, skipping {reset.skipped} events ({reset.removed} "
            f"removed by retention{also})")
