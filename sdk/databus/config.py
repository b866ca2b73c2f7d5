"""Settings of the Databus callback consumer; every limit is named, with its unit."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DatabusConfig:
    """How a registration consumes. Defaults follow Databus where it has one.

    Attributes:
        checkpoint_windows_n: persist a checkpoint after this many windows
            (1 = every window, the default; 0 = not by count).
        checkpoint_interval_ms: persist one when this long has passed since
            the last (0 = not by time, the default). With both set, whichever
            comes first. A callback returning CHECKPOINT forces one at the
            end of its window; SKIP_CHECKPOINT skips one.
        window_retries_max: how often a failing window is rolled back and
            delivered again before consumption stops (5).
        retry_backoff_ms, retry_backoff_max_ms: wait before each retry,
            doubling (100 ms, up to 5000 ms).
        call_budget_ms: time budget of one callback call (Databus
            consumerTimeBudgetMs, 300000); a call over it counts as ERROR.
            An async call is cancelled at the budget; a sync call cannot be
            interrupted and is judged when it returns.
        window_buffering: hold every event of a window before its first
            callback, so a transport failure never shows as a rollback
            (default True). Reads from the log always get whole windows; the
            setting matters for the Key_Shared subscription variant, whose
            deliveries may split a window.
        window_bytes_max: the largest window (value bytes) the buffer holds
            (64 MiB); a bigger window stops consumption with WindowTooLarge.
        window_linger_ms: Key_Shared variant: how long a window's share waits
            for more of its events when none arrive (default 250 ms). A broker
            that marks where shares end closes them at once; the linger is
            left for shares it said would continue, and for older brokers.
        connect_timeout_ms: how long a registration's first connection may be
            refused (or find no broker) before it fails with Unavailable
            (5000 ms; 0 = retry until the broker is there), retried with the
            SDK's backoff meanwhile: a client started with its broker (a
            deploy, a broker restarting) waits for it. As
            ConsumerConfig.connect_timeout_ms (sdk/reconnect.py, rule 1);
            `register_shared` passes it to its Consumer unless given a
            consumer_config.
        unavailable_report_ms: a broker unreachable this long (also while a
            registration starts) is reported to the consumers with on_error
            and logged (5000 ms).
        reader_bytes_max: per read response (0 = the broker's default).
        prefetch_windows_max: windows read ahead of the callbacks (256).
    """

    checkpoint_windows_n: int = 1
    checkpoint_interval_ms: int = 0
    window_retries_max: int = 5
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 5_000
    call_budget_ms: int = 300_000
    window_buffering: bool = True
    window_bytes_max: int = 64 << 20
    window_linger_ms: int = 250
    connect_timeout_ms: int = 5_000
    unavailable_report_ms: int = 5_000
    reader_bytes_max: int = 0
    prefetch_windows_max: int = 256

    def __post_init__(self) -> None:
        for name in ("checkpoint_windows_n", "checkpoint_interval_ms", "window_retries_max",
                     "retry_backoff_ms", "retry_backoff_max_ms", "reader_bytes_max",
                     "connect_timeout_ms"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise ValueError(f"{name}={value!r} is invalid: need an int >= 0")
        for name in ("call_budget_ms", "window_bytes_max", "window_linger_ms",
                     "unavailable_report_ms", "prefetch_windows_max"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name}={value!r} is invalid: need an int >= 1")
        if type(self.window_buffering) is not bool:  # "no" would read as True
            raise ValueError(f"window_buffering={self.window_buffering!r} is invalid: need "
                             "True or False")

    def checkpoint_due(self, windows_since: int, elapsed_ms: int) -> bool:
        """Whether the policy asks for a checkpoint now."""
        by_count = 0 < self.checkpoint_windows_n <= windows_since
        by_time = 0 < self.checkpoint_interval_ms <= elapsed_ms
        return by_count or by_time

    def backoff_ms(self, retry: int) -> int:
        """Wait before retry number `retry` (1, 2, ...)."""
        return min(self.retry_backoff_ms << min(retry - 1, 30), self.retry_backoff_max_ms)
