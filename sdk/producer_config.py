"""The producer's settings: every limit with its unit in the name, checked on creation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sdk.accumulator import Accumulator


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """Producer settings; every limit carries its unit in the name.

    Attributes:
        linger_ms: how long a batch waits for more events while a request of
            its partition is outstanding (default 5). A partition with nothing
            outstanding sends at once, at the end of the loop turn that sent
            the event; what arrives while a request is on the wire goes in
            the next request as soon as the answer comes (Nagle's rule), or
            after linger_ms, whichever is first. 0 sends every batch at once.
        nagle_window: how many requests a partition may have outstanding
            before its events wait to be batched (1: Nagle's rule as above; 2
            sends a second request while the first is on the wire).
        batch_events_max / batch_bytes_max: a batch is sent when it reaches
            either (defaults 1000 events, 1 MiB estimated).
        buffer_events_max: events held from send() until the broker answers;
            past it send() waits and send_nowait() raises BufferFull (100000).
        in_flight_max: unanswered requests on the stream (16).
        idempotent: use a producer id and sequences so retries store nothing
            twice (True).
        delivery_timeout_ms: from send() to failing with DeliveryTimeout (120000).
        max_block_ms: how long send() waits for buffer room (60000).
        window_events_max / window_bytes_max: refuse larger windows before
            sending (100000 events, 16 MiB; the broker's defaults are
            100000 events per batch and 32 MiB per request).
        retry_backoff_ms / retry_backoff_max_ms: reconnect backoff, doubling
            from the first to the cap (100, 1000, as Kafka).
        request_timeout_ms: deadline of unary calls such as InitProducer (30000).
        connect_timeout_ms: given several brokers, create() fails after this when none
            of them can be reached at all (5000, as a consumer's); while some answer
            (a failover under way) it looks for the leader until request_timeout_ms.
            Given one, create() waits at most this for its connection: a broker that
            takes it and never answers (frozen) is told then (sdk/connect_wait.py).
    """

    linger_ms: int = 5
    nagle_window: int = 1
    batch_events_max: int = 1000
    batch_bytes_max: int = 1 << 20
    buffer_events_max: int = 100_000
    in_flight_max: int = 16
    idempotent: bool = True
    delivery_timeout_ms: int = 120_000
    max_block_ms: int = 60_000
    window_events_max: int = 100_000
    window_bytes_max: int = 16 << 20
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    request_timeout_ms: int = 30_000
    connect_timeout_ms: int = 5_000

    def __post_init__(self) -> None:
        for name in ("nagle_window", "batch_events_max", "batch_bytes_max", "buffer_events_max",
                     "in_flight_max", "delivery_timeout_ms", "window_events_max",
                     "window_bytes_max", "retry_backoff_ms", "retry_backoff_max_ms",
                     "request_timeout_ms", "connect_timeout_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is invalid: need an int >= 1")
        for name in ("linger_ms", "max_block_ms"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)!r} is invalid: need an int >= 0")
        if self.buffer_events_max < self.batch_events_max:
            raise ValueError(f"buffer_events_max={self.buffer_events_max} must be at least "
                             f"batch_events_max={self.batch_events_max}")

    @classmethod
    def of(cls, options: dict[str, Any], also: Sequence[str] = ()) -> ProducerConfig:
        """A config from keyword settings; an unknown one is named with the
        allowed ones (`also`: the caller's own keywords, for the message)."""
        unknown = sorted(set(options) - set(cls.__dataclass_fields__))
        if unknown:
            allowed = [*cls.__dataclass_fields__, *also]
            raise ValueError(f"unknown producer setting(s) {', '.join(unknown)}; allowed: "
                             f"{', '.join(allowed)}")
        return cls(**options)

    def accumulator(self, partitions: int, new_token: Callable[[], Any]) -> Accumulator[Any]:
        """A batching buffer with these limits."""
        return Accumulator(partitions=partitions, linger_ms=self.linger_ms,
                           batch_events_max=self.batch_events_max,
                           batch_bytes_max=self.batch_bytes_max,
                           buffer_events_max=self.buffer_events_max, new_token=new_token)
