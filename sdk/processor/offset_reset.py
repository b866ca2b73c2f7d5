"""Where a partition resumes when its checkpoint is outside the log.

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
at or past the start resumes as always. Without a known log start (None)
nothing is decided here and the read says what it finds.

A checkpoint past the log's end (c + 1 > the end: the broker refuses the read
with `offset_past_end`) is no retention's doing: the topic was deleted and
created again (a checkpoint store other than the broker's keeps the old
checkpoints), the checkpoint was edited or restored, or the log lost events
after it (a truncation). Resuming there would wait for the log to reach c + 1
and skip unseen every event stored at the offsets below it, as Kafka treats
a fetch past the log end as OffsetOutOfRange and applies auto.offset.reset.
`resume_past_end` applies the same policy: "fail" raises `CheckpointPastEnd`,
"earliest" resumes at the log's start (the new log's events are all
processed, some perhaps again), "latest" at its end.

A checkpoint of another incarnation of the topic (its `incarnation` is set and
is not the topic's: the topic was deleted and created again under the same
name, and a store other than the broker's kept the checkpoint) names an
offset of a log that is gone, whatever the new log's length: once the new
log grew past the offset, the broker would accept the read and the events
below it would be skipped unseen (Kafka tells such offsets apart by topic
ID, KIP-516). `resume_other_incarnation` decides it as `resume_past_end`
does, before any read. A checkpoint without an incarnation (written before
they were kept), or a topic whose incarnation is not known, is not judged.

Pure: the log's start and end are arguments (the processor's cycle reads them
with the topic's description just before it claims; the broker's refusal is
what says a checkpoint is past the end); no I/O, no clock.
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


class CheckpointPastEnd(CheckpointExpired):
    """A partition's checkpoint is past the log's end (the log was cut after
    it, or the topic made again) and `offset_reset` is "fail": the partition
    does not start. A `CheckpointExpired`, so code that handles one handles
    both: the checkpoint cannot be resumed from and `offset_reset` decides."""


class CheckpointOtherIncarnation(CheckpointExpired):
    """A partition's checkpoint is of another incarnation of the topic (it was
    deleted and created again since) and `offset_reset` is "fail": the
    partition does not start. A `CheckpointExpired`, as `CheckpointPastEnd`."""


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
        log_end_offset: None when the checkpoint was behind the log's start;
            the log's end (its next offset) when the checkpoint was past it or
            of another incarnation.
        checkpoint_incarnation, topic_incarnation: both set (and different)
            when the checkpoint was of another incarnation of the topic; ""
            otherwise.
    """

    offset_reset: OffsetReset
    checkpoint_offset: int
    log_start_offset: int
    resumed_offset: int
    log_end_offset: int | None = None
    checkpoint_incarnation: str = ""
    topic_incarnation: str = ""

    @property
    def past_end(self) -> bool:
        """The checkpoint was past the log's end (not behind its start), or of
        another incarnation (its offset is not of this log either)."""
        return self.log_end_offset is not None

    @property
    def other_incarnation(self) -> bool:
        """The checkpoint was of another incarnation of the topic."""
        return is_other_incarnation(self.checkpoint_incarnation, self.topic_incarnation)

    @property
    def removed(self) -> int:
        """Events after the checkpoint that retention removed (none when the
        checkpoint was past the end or of another incarnation: those offsets are
        not in this log)."""
        return 0 if self.past_end else self.log_start_offset - self.checkpoint_offset - 1

    @property
    def skipped(self) -> int:
        """Events that will not be processed: after an expired checkpoint, the
        removed ones, and for "latest" also those still stored before the log
        end; after one past the end or of another incarnation, those stored that
        "latest" passes over."""
        if self.past_end:
            return self.resumed_offset - self.log_start_offset
        return self.resumed_offset - self.checkpoint_offset - 1


def check_offset_reset(value: Any) -> None:
    """Raises ValueError naming what is allowed."""
    if not isinstance(value, str) or value not in OFFSET_RESETS:
        raise ValueError(f"offset_reset={value!r} is invalid; allowed: "
                         f"{', '.join(repr(v) for v in OFFSET_RESETS)} (what a partition whose "
                         "checkpoint is behind the log's start, past its end or of a topic "
                         "since deleted and created again does)")


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


def is_past_end(broker_error: str | None, start: object, checkpoint_offset: int,
                log_start_offset: int | None, log_end_offset: int | None) -> bool:
    """Whether a read the broker refused is a checkpoint past the log's end,
    for `resume_past_end` to decide: the broker named it `offset_past_end`,
    the read started right after the checkpoint, and the log as the cycle
    described it is known and ends at or before the checkpoint. A description
    read before the log was cut does not show it: the refusal is then raised
    as it came, and the next cycle describes the log again."""
    return (broker_error == "offset_past_end" and start == checkpoint_offset + 1
            and log_start_offset is not None and log_end_offset is not None
            and log_end_offset <= checkpoint_offset)


def resume_past_end(where: str, checkpoint_offset: int, log_start_offset: int,
                    log_end_offset: int, offset_reset: OffsetReset) -> ResumeAt:
    """Where a partition resumes whose checkpoint the broker found past the
    log's end (its read from checkpoint_offset + 1 was refused).

    Args:
        where: "topic/partition of group 'g'", for the message.
        checkpoint_offset: the stored checkpoint's offset (>= log_end_offset).
        log_start_offset, log_end_offset: the log's first offset and its end
            (the offset its next event gets).
        offset_reset: "fail", "earliest" or "latest".
    Returns:
        the log's start ("earliest") or "latest".
    Raises:
        CheckpointPastEnd: offset_reset is "fail".
    """
    assert checkpoint_offset >= log_end_offset, (checkpoint_offset, log_end_offset)
    if offset_reset == "earliest":
        return log_start_offset
    if offset_reset == "latest":
        return "latest"
    assert offset_reset == "fail", offset_reset
    raise CheckpointPastEnd(
        f"{where}: checkpoint offset {checkpoint_offset} is past the log's end "
        f"{log_end_offset} ({held(log_start_offset, log_end_offset)}): the topic was deleted "
        "and created again, the checkpoint was edited or restored, or the log was truncated "
        "after it; resuming at "
        f"{checkpoint_offset + 1} would skip unseen the next "
        f"{checkpoint_offset - log_end_offset + 1} events it stores (offsets "
        f"{log_end_offset}..{checkpoint_offset}). With offset_reset='fail' the partition "
        "does not start; pass offset_reset='earliest' (resume at "
        f"{log_start_offset}) or 'latest' (resume at the log end), or move the checkpoint")


def is_other_incarnation(checkpoint_incarnation: str, topic_incarnation: str) -> bool:
    """Whether a checkpoint is of another incarnation of the topic: both known
    and different. "" on either side (a checkpoint written before incarnations
    were kept, a broker that does not say it) is not judged: it works as before."""
    return bool(checkpoint_incarnation and topic_incarnation
                and checkpoint_incarnation != topic_incarnation)


def resume_other_incarnation(where: str, checkpoint_offset: int, checkpoint_incarnation: str,
                             topic_incarnation: str, log_start_offset: int,
                             log_end_offset: int, offset_reset: OffsetReset) -> ResumeAt:
    """Where a partition resumes whose checkpoint is of another incarnation of
    the topic (`is_other_incarnation`), whatever the new log's length.

    Args:
        where: "topic/partition of group 'g'", for the message.
        checkpoint_offset, checkpoint_incarnation: the stored checkpoint's.
        topic_incarnation: the topic's now (the cycle's description).
        log_start_offset, log_end_offset: the new log's first offset and end.
        offset_reset: "fail", "earliest" or "latest".
    Returns:
        the log's start ("earliest") or "latest".
    Raises:
        CheckpointOtherIncarnation: offset_reset is "fail".
    """
    assert is_other_incarnation(checkpoint_incarnation, topic_incarnation)
    if offset_reset == "earliest":
        return log_start_offset
    if offset_reset == "latest":
        return "latest"
    assert offset_reset == "fail", offset_reset
    raise CheckpointOtherIncarnation(
        f"{where}: checkpoint offset {checkpoint_offset} is of incarnation "
        f"{checkpoint_incarnation!r} of the topic, which was deleted and created again: it "
        f"is now incarnation {topic_incarnation!r} ({held(log_start_offset, log_end_offset)}), "
        "and the checkpoint's offset names no event of it; resuming after it would skip "
        "unseen the new topic's events up to it. With offset_reset='fail' the partition "
        f"does not start; pass offset_reset='earliest' (resume at {log_start_offset}, the "
        "new topic's start) or 'latest' (resume at its end), or move or delete the "
        "checkpoint")


def held(log_start_offset: int, log_end_offset: int) -> str:
    """What the log holds, in words."""
    if log_start_offset >= log_end_offset:
        return f"it is empty and its next event gets offset {log_end_offset}"
    return f"it holds offsets {log_start_offset}..{log_end_offset - 1}"


def reset_message(where: str, reset: CheckpointReset) -> str:
    """The one WARNING line a reset is said with."""
    if reset.other_incarnation:
        assert reset.log_end_offset is not None
        return (f"{where}: checkpoint offset {reset.checkpoint_offset} is of incarnation "
                f"{reset.checkpoint_incarnation!r} of the topic, which was deleted and "
                f"created again (now incarnation {reset.topic_incarnation!r}; "
                f"{held(reset.log_start_offset, reset.log_end_offset)}); "
                f"offset_reset={reset.offset_reset!r}: resuming at offset "
                f"{reset.resumed_offset}, skipping {reset.skipped} events still stored")
    if reset.log_end_offset is not None:
        return (f"{where}: checkpoint offset {reset.checkpoint_offset} is past the log's end "
                f"{reset.log_end_offset} ({held(reset.log_start_offset, reset.log_end_offset)}; "
                "the topic made again, or the log cut after the checkpoint); "
                f"offset_reset={reset.offset_reset!r}: resuming at offset "
                f"{reset.resumed_offset}, skipping {reset.skipped} events still stored")
    passed = reset.skipped - reset.removed
    also = f", {passed} still stored passed over" if passed > 0 else ""
    return (f"{where}: checkpoint offset {reset.checkpoint_offset} is behind the log's start "
            f"{reset.log_start_offset} (retention removed offsets {reset.checkpoint_offset + 1}"
            f"..{reset.log_start_offset - 1}); offset_reset={reset.offset_reset!r}: resuming at "
            f"offset {reset.resumed_offset}, skipping {reset.skipped} events ({reset.removed} "
            f"removed by retention{also})")
