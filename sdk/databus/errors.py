"""Errors of the Databus callback consumer. Each says what happened and what to change."""

from __future__ import annotations

from sdk.errors import KeybusError, OffsetOutOfRange, ResourceExhausted


class DatabusError(KeybusError):
    """Base of the callback consumer's errors."""


class WindowRetriesExhausted(DatabusError):
    """A window kept failing (a callback returned ERROR, raised or ran over its
    time budget) more than `window_retries_max` times; consumption stopped."""

    def __init__(self, partition: int, scn: int, retries: int) -> None:
        super().__init__(f"window scn {scn} of partition {partition} failed {retries + 1} times "
                         f"(window_retries_max={retries}); consumption stopped before it, "
                         "nothing after it was delivered")
        self.partition = partition
        self.scn = scn


class ConsumerFatal(DatabusError):
    """A callback returned FATAL (or on_start_consumption failed): consumption stopped."""

    def __init__(self, callback: str, partition: int | None = None, scn: int | None = None) -> None:
        where = "" if scn is None else f" in window scn {scn} of partition {partition}"
        super().__init__(f"{callback} returned FATAL{where}; consumption stopped at once")
        self.callback = callback


class WindowTooLarge(ResourceExhausted, DatabusError):
    """A buffered window grew past `window_bytes_max`."""

    def __init__(self, partition: int, scn: int, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(f"window scn {scn} of partition {partition} holds {size_bytes} bytes of "
                         f"values, over window_bytes_max={limit_bytes}; raise the limit or turn "
                         "window buffering off")


class CheckpointFailed(DatabusError):
    """Writing a checkpoint to the store failed; the windows stay pending and the
    next checkpoint writes them."""

    def __init__(self, partition: int, scn: int, cause: str) -> None:
        super().__init__(f"checkpoint of partition {partition} at scn {scn} was not stored: "
                         f"{cause}; it is retried at the next checkpoint")
        self.partition = partition
        self.scn = scn


class CheckpointOtherIncarnation(OffsetOutOfRange, DatabusError):
    """A partition's checkpoint is of another incarnation of the topic (it was
    deleted and created again since the checkpoint was written) and the
    registration does not allow bootstrap: it does not start. The checkpoint's
    offset and SCN name no event of the new topic, and resuming after them would
    skip the new topic's first windows unseen. An `OffsetOutOfRange`, as a
    checkpoint that retention passed (and as the event processor's error of the
    same name): the checkpoint cannot be resumed from."""
