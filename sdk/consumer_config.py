"""A consumer's settings (`ConsumerConfig`) and the Subscribe open request they make.

Split from consumer.py (one job per file); `sdk.consumer` re-exports it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

from sdk.core.model import HashRange
from sdk.core.names import NAME_CHARACTERS
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.wire_ints import INT32_MAX, INT64_MAX, UINT32_MAX
from sdk.reader import Start, filter_to_proto, ranges_to_proto, start_to_proto
from sdk.reconnect import RetryPolicy

TYPES = {"exclusive": pb.EXCLUSIVE, "shared": pb.SHARED, "failover": pb.FAILOVER,
         "key_shared": pb.KEY_SHARED}
MODES = {"auto_split": pb.AUTO_SPLIT, "sticky": pb.STICKY, "consistent": pb.CONSISTENT}


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """Consumer settings.

    Attributes:
        type: "exclusive" (default), "shared", "failover" or "key_shared".
        mode: Key_Shared mode: "consistent", "auto_split" or "sticky"; None (the
            default) joins a subscription in the mode it has, and creates one in
            the broker's `key_shared_default_mode` (consistent, as Pulsar's).
        ranges: sticky mode: the hash ranges to serve ("0-32767" or pairs).
        start: where a new subscription starts: "latest" (default),
            "earliest", an offset or {"scn": n} (the same values as Reader's
            start; an existing subscription keeps its cursor).
        key_filter: broker-side filter ("mod:10:[0,3]", a KeyFilter, ...).
        consumer_name: unique per subscription; default a random name
            (give a stable one for consistent hashing to return its ranges).
        priority: Failover: 0 is the highest (default 0).
        partitions: the partitions to consume (default all).
        receiver_queue_size: permits per partition, bounds the buffer (1000).
        receiver_queue_total_max: permits of all partitions together (50,000,
            Pulsar's maxTotalReceiverQueueSizeAcrossPartitions): with many
            partitions each gets this divided by their number (at least 2), so
            a consumer of 1,024 partitions buffers at most about 50,000 events,
            not a million.
        ack_timeout_ms: redeliver events not acknowledged within this long
            after the application took them (receive / receive_batch): the
            consumer nacks them, which counts toward max_redeliveries; time
            in the receive buffer does not count (0 = never; the broker
            refuses 1..999 and above 3,600,000 unless configured).
        max_redeliveries / dead_letter_topic: after this many redeliveries an
            event goes to the dead-letter topic (0 = never; topic default
            "<topic>-<subscription>-DLQ").
        look_ahead_max: Key_Shared events the broker may hold past blocked
            keys (0 = broker default).
        ack_flush_ms: how long acks gather before they are sent (20); permit
            grants and nacks do not wait for it.
        nack_delay_ms: default delay of nack() (0 = the broker's default).
        reconnect: reconnect when the broker goes away (True).
        connect_timeout_ms: a broker never reached fails subscribe() after
            this long with "cannot reach broker at ..." (5000; 0 = forever).
        retry_timeout_ms: a lost broker, or one refusing the reconnect (say,
            another consumer took the Exclusive subscription), is retried this
            long, then receive() raises Unavailable or the refusal's error
            (0 = forever, the default).
        retry_backoff_ms / retry_backoff_max_ms: reconnect backoff (100, 2000).
        initial_position: deprecated spelling of `start`.
    """

    type: str = "exclusive"
    mode: str | None = None
    ranges: str | Sequence[HashRange | tuple[int, int]] | None = None
    start: Start = "latest"
    key_filter: Any = None
    consumer_name: str = ""
    priority: int = 0
    partitions: Sequence[int] = ()
    receiver_queue_size: int = 1000
    receiver_queue_total_max: int = 50_000
    ack_timeout_ms: int = 0
    max_redeliveries: int = 0
    dead_letter_topic: str = ""
    look_ahead_max: int = 0
    ack_flush_ms: int = 20
    nack_delay_ms: int = 0
    reconnect: bool = True
    connect_timeout_ms: int = 5_000
    retry_timeout_ms: int = 0
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 2_000
    initial_position: Start | None = None

    def __post_init__(self) -> None:
        if self.initial_position is not None:
            warnings.warn("ConsumerConfig(initial_position=...) is now start=... (the same "
                          "name as Reader's and the CLI's --start)", DeprecationWarning,
                          stacklevel=3)
            object.__setattr__(self, "start", self.initial_position)
            object.__setattr__(self, "initial_position", None)
        _check_ints(self)
        check_partitions(self.partitions, "partitions")

    @classmethod
    def of(cls, options: dict[str, Any]) -> ConsumerConfig:
        """A config from keyword settings; an unknown one is named with the allowed ones."""
        allowed = [f for f in cls.__dataclass_fields__ if f != "initial_position"]
        unknown = sorted(set(options) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown consumer setting(s) {', '.join(unknown)}; allowed: "
                             f"{', '.join(allowed)}")
        return cls(**options)

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.connect_timeout_ms, self.retry_timeout_ms,
                           self.retry_backoff_ms, self.retry_backoff_max_ms)

    def open_request(self, topic: str, subscription: str, name: str) -> pb.SubscribeOpen:
        """The SubscribeOpen message. Raises ValueError naming a bad setting."""
        for field, value in (("topic", topic), ("subscription", subscription)):
            if not isinstance(value, str):  # protobuf's own error names neither
                raise ValueError(f"{field} {value!r} is invalid: give a name (a str of "
                                 f"characters from {NAME_CHARACTERS})")
        if self.type not in TYPES:
            raise ValueError(f"type {self.type!r} is invalid; allowed: {', '.join(TYPES)}")
        if self.mode is not None and self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is invalid; allowed: {', '.join(MODES)} "
                             "or None (the subscription's, or the broker's default)")
        if self.ranges and not (self.type == "key_shared" and self.mode == "sticky"):
            raise ValueError(f"ranges={self.ranges!r} are only for type='key_shared' with "
                             f"mode='sticky' (here type={self.type!r}, mode={self.mode!r}); "
                             "the other types and modes assign hash ranges themselves")
        request = pb.SubscribeOpen(
            topic=topic, subscription=subscription, consumer_name=name, type=TYPES[self.type],
            sticky_ranges=ranges_to_proto(self.ranges),
            initial_position=start_to_proto(self.start), priority=self.priority,
            # set only with a timeout (the SDK times it: sdk/ack_timeouts.py), so a broker
            # from before the field, which refuses unknown fields, still takes the rest
            ack_timeout_ms=self.ack_timeout_ms,
            ack_timeout_by_client=self.ack_timeout_ms > 0,
            max_redeliveries=self.max_redeliveries,
            dead_letter_topic=self.dead_letter_topic, partitions=list(self.partitions),
            look_ahead_max=self.look_ahead_max)
        if self.mode is not None:
            request.key_shared_mode = MODES[self.mode]
        key_filter = filter_to_proto(self.key_filter)
        if key_filter is not None:
            request.filter.CopyFrom(key_filter)
        return request


# The int settings and the least each allows; the uint32 and int32 fields of
# SubscribeOpen bound the rest of what is sent (protobuf's own error names no field).
_INT_MIN = {"priority": 0, "receiver_queue_size": 2, "receiver_queue_total_max": 2,
            "ack_timeout_ms": 0, "max_redeliveries": 0, "look_ahead_max": 0, "ack_flush_ms": 0,
            "nack_delay_ms": 0, "connect_timeout_ms": 0, "retry_timeout_ms": 0,
            "retry_backoff_ms": 1, "retry_backoff_max_ms": 1}
_INT_MAX = {"priority": INT32_MAX, "ack_timeout_ms": UINT32_MAX,
            "max_redeliveries": UINT32_MAX, "look_ahead_max": UINT32_MAX}


def _check_ints(config: ConsumerConfig) -> None:
    """Refuse a setting that is not an int in its range, naming it (a string
    such as "10" gave a bare TypeError later; -1 was taken)."""
    for name, low in _INT_MIN.items():
        value = getattr(config, name)
        high = _INT_MAX.get(name)
        if type(value) is not int or value < low or (high is not None and value > high):
            allowed = f"{low}..{high}" if high is not None else f">= {low}"
            raise ValueError(f"{name}={value!r} is invalid: need an int {allowed}")


def check_nack_delay(delay_ms: object) -> int:
    """A nack's delay, checked when nack() is called: a bad one raised only later,
    inside the background flush (protobuf's "Value out of range"), which ended that
    task, so no ack, nack or permit was sent again and the consumer hung silently.

    Raises:
        ValueError: not an int in 0..UINT32_MAX, naming what is allowed.
    """
    if type(delay_ms) is not int or not 0 <= delay_ms <= UINT32_MAX:
        raise ValueError(f"delay_ms={delay_ms!r} is invalid: need an int 0..{UINT32_MAX} "
                         "(0 = the broker's nack_delay_ms_default; the broker refuses more "
                         "than its nack_delay_ms_max, 3,600,000 unless configured)")
    return delay_ms


def check_partitions(partitions: object, setting: str) -> list[int]:
    """Partition indexes given by the caller, as a list. Protobuf's own errors for a
    bad one ("Value out of range: -1", "'int' object is not iterable") named neither
    the setting nor what is allowed.

    Raises:
        ValueError: not a collection of ints 0..UINT32_MAX, naming the setting.
    """
    if isinstance(partitions, str | bytes) or not isinstance(partitions, Iterable):
        raise ValueError(f"{setting}={partitions!r} is invalid: give a list of partition "
                         f"indexes, ints 0..{UINT32_MAX} (e.g. [0, 2])")
    values = list(partitions)
    for value in values:
        if type(value) is not int or not 0 <= value <= UINT32_MAX:
            raise ValueError(f"{setting}={partitions!r} is invalid: partition {value!r} is "
                             f"not an int 0..{UINT32_MAX}")
    return values


def check_ack_offsets(partition: object, offsets: Iterable[object],
                      partitions: Sequence[int]) -> list[int]:
    """An `ack_offsets` call's arguments, checked at the call. Unchecked, an offset
    below 0 was sent and the broker ended the consumer's stream for it (so the
    consumer failed), a float was cut to an int and acknowledged another event,
    and one past int64 raised an OverflowError that named nothing.

    Args:
        partitions: the consumer's partitions (empty before it attached: any).
    Raises:
        ValueError: naming the argument and what is allowed.
    """
    if type(partition) is not int or partition < 0 or (partitions and
                                                         partition not in partitions):
        allowed = f"one of this consumer's partitions {list(partitions)}" if partitions \
            else "an int >= 0"
        raise ValueError(f"ack_offsets(): partition={partition!r:.60} is invalid; use {allowed}")
    if isinstance(offsets, str | bytes):
        raise ValueError(f"ack_offsets(): offsets={offsets!r:.60} is invalid; use an iterable "
                         "of int offsets")
    checked = []
    for offset in offsets:
        value = int(offset) if isinstance(offset, Integral) and not isinstance(offset, bool) \
            else -1
        if not 0 <= value <= INT64_MAX:
            raise ValueError(f"ack_offsets(): offset {offset!r:.60} is invalid; offsets are "
                             f"ints 0..{INT64_MAX}")
        checked.append(value)
    return checked
