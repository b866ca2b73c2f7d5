"""Option validation for the keybus data source. Pure: no Spark, gRPC or I/O
(but for importing the module a `tokenProvider` names: token_provider.py).

Rules:
1. Option names follow Spark's Kafka connector where the idea is the same
   (`startingOffsets`, `endingOffsets`, `failOnDataLoss`, `includeHeaders`);
   Spark hands them over case-insensitively, so they are matched that way.
2. An unknown option, or a known one with a malformed value, raises
   `OptionError` at once (when the DataFrame is defined, not when a task
   runs). The message names the option, the value and what is allowed.
3. Which options apply depends on the use: batch read, streaming read or
   write. An option that does not apply to the use is refused (e.g.
   `endingOffsets` in a streaming read), as Kafka refuses it.

This module knows option text and the value types it maps to; it does not
know about topics' real partitions or offsets (that is `partitioning.py`).
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from sdk.channel import parse_broker
from sdk.core.filters import FilterError, KeyFilterSpec
from sdk.security import ClientSecurity
from spark_connector.partitioning import (
    OffsetsSpec,
    PartitioningError,
    RangesSpec,
    parse_offsets,
    parse_ranges_option,
)
from spark_connector.token_provider import check_token_text, parse_token_provider

E = TypeVar("E", bound=enum.Enum)


class OptionError(ValueError):
    """A bad or unknown option of the keybus data source; the message names it."""


class Use(enum.Enum):
    READ = "read"  # batch or streaming: when a read is defined, before Spark says which
    BATCH_READ = "batch read"
    STREAM_READ = "streaming read"
    WRITE = "write"


class Pushdown(enum.Enum):
    """Filter pushdown modes (see docs/spark.md, "Filter pushdown")."""

    OFF = "off"
    GUARDED = "guarded"


class WriteIdempotence(enum.Enum):
    """How a write task picks its producer id (see writer.py)."""

    TASK = "task"
    ATTEMPT = "attempt"


# Canonical spelling of every option, by the lower-case form Spark passes.
_COMMON = ("broker", "tlsCaFile", "tlsCertFile", "tlsKeyFile", "tlsServerName", "token",
           "tokenFile", "tokenProvider")
_READ = ("topic", "ranges", "startingOffsets", "filter", "failOnDataLoss", "includeHeaders",
         "readEventsMax")
_BATCH_READ = ("endingOffsets", "pushdown")
_STREAM_READ = ("maxEventsPerTrigger",)
_WRITE = ("topic", "writeBatchEvents", "writeIdempotence", "writeInFlightMax")
# Spark itself may add these to a data source's options; they are not ours.
_SPARK_OWNED = ("path", "checkpointLocation", "queryName")

_ALLOWED: dict[Use, tuple[str, ...]] = {
    Use.READ: _COMMON + _READ + _BATCH_READ + _STREAM_READ,
    Use.BATCH_READ: _COMMON + _READ + _BATCH_READ,
    Use.STREAM_READ: _COMMON + _READ + _STREAM_READ,
    Use.WRITE: _COMMON + _WRITE,
}

READ_EVENTS_MAX_DEFAULT = 10_000
WRITE_BATCH_EVENTS_DEFAULT = 5_000
WRITE_BATCH_EVENTS_MAX = 100_000  # the broker's batch_events_max default
WRITE_IN_FLIGHT_DEFAULT = 8
WRITE_IN_FLIGHT_MAX = 256  # the broker's produce_in_flight_max default


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """A validated read configuration (batch or streaming)."""

    broker: str
    topics: tuple[str, ...]
    ranges: RangesSpec
    starting: OffsetsSpec
    ending: OffsetsSpec
    key_filter: KeyFilterSpec | None
    fail_on_data_loss: bool
    include_headers: bool
    events_per_response_max: int
    max_events_per_trigger: int | None
    pushdown: Pushdown
    security: ClientSecurity | None = None
    # startingOffsets=snapshot: the compacted view first (spark_connector/snapshot.py).
    snapshot: bool = False


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """A validated write configuration; topic None = every row names its topic."""

    broker: str
    topic: str | None
    batch_events_max: int
    idempotence: WriteIdempotence
    in_flight_max: int
    security: ClientSecurity | None = None


def check_names(options: Mapping[str, str], use: Use) -> dict[str, str]:
    """Map options to their canonical names; raise OptionError on an unknown one."""
    allowed = _ALLOWED[use]
    by_lower = {name.lower(): name for name in allowed}
    spark_owned = {name.lower() for name in _SPARK_OWNED}
    out: dict[str, str] = {}
    for key, value in options.items():
        name = by_lower.get(key.lower())
        if name is None:
            if key.lower() in spark_owned:
                continue
            raise OptionError(unknown_option_message(key, use))
        out[name] = value
    return out


def unknown_option_message(key: str, use: Use) -> str:
    """Why `key` is refused for `use`, in the option's documented spelling.

    Spark lower-cases option names before the connector sees them, so the
    message names the canonical spelling when the option exists for another
    use (`endingOffsets` on a stream), and the closest allowed name when it
    looks like a misspelling (`startingOffset`).
    """
    allowed = _ALLOWED[use]
    every = {name.lower(): name for names in _ALLOWED.values() for name in names}
    known = every.get(key.lower())
    if known is not None:
        uses = [u.value for u in (Use.BATCH_READ, Use.STREAM_READ, Use.WRITE)
                if known in _ALLOWED[u]]
        return (f"option {known!r} applies to a keybus {' or '.join(uses)} only, not to a "
                f"{use.value}; a {use.value} takes: {', '.join(allowed)} (see docs/spark.md)")
    by_lower = {name.lower(): name for name in allowed}
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.75)
    hint = f"did you mean {by_lower[close[0]]!r}? " if close else ""
    return (f"option {key!r} is not known for a keybus {use.value}; {hint}allowed: "
            f"{', '.join(allowed)} (see docs/spark.md)")


def parse_read_options(options: Mapping[str, str], use: Use) -> ReadOptions:
    """Validate the options of spark.read / spark.readStream .format("keybus").

    Args:
        use: BATCH_READ, STREAM_READ, or READ when it is not known yet.
    Raises:
        OptionError: naming the unknown or malformed option and what is allowed.
    """
    assert use is not Use.WRITE
    streaming = use is not Use.BATCH_READ
    named = check_names(options, use)
    topics = _topics(named)
    default_start = "latest" if streaming else "earliest"
    snapshot = _snapshot_start(named, use)
    try:
        ranges = parse_ranges_option(named.get("ranges", "1"))
        starting = parse_offsets("earliest" if snapshot else named.get(
            "startingOffsets", default_start), "startingOffsets", topics,
            allow_latest=streaming, allow_earliest=True)
        ending = parse_offsets(named.get("endingOffsets", "latest"), "endingOffsets", topics,
                               allow_latest=True, allow_earliest=False)
    except PartitioningError as e:
        raise OptionError(str(e)) from None
    return ReadOptions(
        broker=_broker(named),
        topics=topics,
        ranges=ranges,
        starting=starting,
        ending=ending,
        key_filter=_key_filter(named.get("filter")),
        fail_on_data_loss=_boolean(named, "failOnDataLoss", True),
        include_headers=_boolean(named, "includeHeaders", False),
        events_per_response_max=_integer(named, "readEventsMax", READ_EVENTS_MAX_DEFAULT, 1,
                                         READ_EVENTS_MAX_DEFAULT),
        max_events_per_trigger=(_integer(named, "maxEventsPerTrigger", 0, 1, None)
                                if "maxEventsPerTrigger" in named else None),
        pushdown=_choice(named, "pushdown", Pushdown, Pushdown.OFF),
        security=_security(named),
        snapshot=snapshot,
    )


def _snapshot_start(named: Mapping[str, str], use: Use) -> bool:
    """startingOffsets=snapshot; refuses the options that do not go with it."""
    if named.get("startingOffsets", "").strip().lower() != "snapshot":
        return False
    if use is Use.BATCH_READ:
        for name in ("endingOffsets", "pushdown"):
            if name in named:
                raise OptionError(f"option {name!r} does not apply with startingOffsets=snapshot:"
                                  " a snapshot is each partition's compacted view at one point")
    return True


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate the options of df.write / df.writeStream .format("keybus").

    Raises:
        OptionError: naming the unknown or malformed option and what is allowed.
    """
    named = check_names(options, Use.WRITE)
    topic = named.get("topic")
    if topic is not None and (not topic.strip() or "," in topic):
        raise OptionError(f"option 'topic'={topic!r}: a write takes one topic name "
                          "(or leave it out and give each row a 'topic' column)")
    return WriteOptions(
        broker=_broker(named),
        topic=topic.strip() if topic is not None else None,
        batch_events_max=_integer(named, "writeBatchEvents", WRITE_BATCH_EVENTS_DEFAULT, 1,
                                  WRITE_BATCH_EVENTS_MAX),
        idempotence=_choice(named, "writeIdempotence", WriteIdempotence, WriteIdempotence.TASK),
        in_flight_max=_integer(named, "writeInFlightMax", WRITE_IN_FLIGHT_DEFAULT, 1,
                               WRITE_IN_FLIGHT_MAX),
        security=_security(named),
    )


def _broker(named: Mapping[str, str]) -> str:
    broker = named.get("broker", "").strip()
    if not broker:
        raise OptionError("option 'broker' is required: the broker address HOST:PORT, "
                          "e.g. .option('broker', 'localhost:6650')")
    try:
        parse_broker(broker)
    except ValueError as e:
        raise OptionError(f"option 'broker': {e}") from None
    return broker


def _security(named: Mapping[str, str]) -> ClientSecurity | None:
    """TLS and credentials from tlsCaFile, tlsCertFile, tlsKeyFile, tlsServerName,
    token, tokenFile and tokenProvider (paths are read, and a provider imported,
    where the connection is opened: on the driver and on every executor, as
    Kafka's ssl.*.location options; the provider is imported here once too, so
    a bad name fails when the DataFrame is defined)."""
    provider_name = named.get("tokenProvider")
    try:
        check_token_text(named.get("token", ""))
        provider = None if provider_name is None else parse_token_provider(provider_name)
    except ValueError as e:
        raise OptionError(str(e)) from None
    try:
        security = ClientSecurity(
            ca_file=named.get("tlsCaFile", ""), cert_file=named.get("tlsCertFile", ""),
            key_file=named.get("tlsKeyFile", ""), server_name=named.get("tlsServerName", ""),
            token=named.get("token", ""), token_file=named.get("tokenFile", ""),
            token_provider=provider)
    except ValueError as e:
        raise OptionError(f"options tlsCertFile/tlsKeyFile/token/tokenFile/tokenProvider: {e}"
                          ) from None
    return None if security == ClientSecurity() else security


def _topics(named: Mapping[str, str]) -> tuple[str, ...]:
    text = named.get("topic")
    if text is None:
        raise OptionError("option 'topic' is required: a topic name or a comma-separated "
                          "list, e.g. .option('topic', 'orders')")
    topics = [t.strip() for t in text.split(",")]
    if not all(topics):
        raise OptionError(f"option 'topic'={text!r} has an empty name; use names separated "
                          "by commas, e.g. orders,members")
    if len(set(topics)) != len(topics):
        raise OptionError(f"option 'topic'={text!r} names a topic twice")
    return tuple(sorted(topics))


def _key_filter(text: str | None) -> KeyFilterSpec | None:
    if text is None:
        return None
    try:
        spec = KeyFilterSpec.parse_cli(text)
    except FilterError as e:
        raise OptionError(f"option 'filter'={text!r}: {e}") from None
    return None if spec.is_none else spec


def _boolean(named: Mapping[str, str], name: str, default: bool) -> bool:
    text = named.get(name)
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"option {name!r}={text!r}: allowed true or false")
    return lowered == "true"


def _integer(named: Mapping[str, str], name: str, default: int, low: int,
             high: int | None) -> int:
    text = named.get(name)
    if text is None:
        return default
    body = text.strip()
    upper = "" if high is None else f"..{high}"
    if not body.isdigit() or int(body) < low or (high is not None and int(body) > high):
        raise OptionError(f"option {name!r}={text!r}: allowed an integer {low}{upper or ' or more'}")
    return int(body)


def _choice(named: Mapping[str, str], name: str, kind: type[E], default: E) -> E:
    text = named.get(name)
    if text is None:
        return default
    for member in kind:
        if member.value == text.strip().lower():
            return member
    allowed = ", ".join(str(m.value) for m in kind)
    raise OptionError(f"option {name!r}={text!r}: allowed {allowed}")
