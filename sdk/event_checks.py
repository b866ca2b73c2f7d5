"""Checks of the producer's event fields: keys, values, ordering keys, optional columns.

Pure (no asyncio, grpc or clock). Each check returns the value to send or
raises ValueError naming the argument and what is allowed; the accumulator and
the bulk and window paths of the producer share them, so an event is judged
the same way whichever call sent it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sdk.core.columns import OPCODES, TEXT_BYTES_MAX, text_bytes_over, value_size_error
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.wire_ints import INT64_MAX, INT64_MIN

# Estimated wire bytes per event beside its value: key, slot, field tags.
EVENT_OVERHEAD_BYTES = 16


# Default of every optional column (what an absent entry means on the wire).
COLUMN_DEFAULTS: dict[str, Any] = {
    "ordering_keys": "",
    "sources": "",
    "opcodes": pb.UPSERT,
    "schemas": "",
    "headers": None,
    "event_times_ms": 0,
}

def _checked_key_size(key: Any) -> tuple[int | str, int]:
    key = check_key(key)
    return key, EVENT_OVERHEAD_BYTES + (len(key) if type(key) is str else 0)


def partition_error(partition: Any, partitions: int) -> ValueError:
    """The error for a partition outside the topic's."""
    return ValueError(f"partition {partition!r} is invalid: the topic has partitions "
                      f"0..{partitions - 1}")


def check_key(key: Any, name: str = "key") -> int | str:
    """A key as a plain int (int64) or non-empty str.

    Raises:
        ValueError: naming `name` and what a key may be.
    """
    if isinstance(key, int) and not isinstance(key, bool):
        if INT64_MIN <= key <= INT64_MAX:
            return int(key)
        raise ValueError(f"{name} {key} is out of the int64 range "
                         f"[{INT64_MIN}, {INT64_MAX}]")
    if isinstance(key, str) and key:
        return str(key)
    raise ValueError(f"{name} must be an int in the int64 range or a non-empty str; "
                     f"got {key!r}")


def check_keys(keys: Sequence[Any], name: str = "keys") -> list[int | str]:
    """Every key checked as `check_key` does; errors name `name[i]`."""
    out: list[Any] = list(keys)
    for i, key in enumerate(out):
        t = type(key)
        if t is int:
            if not INT64_MIN <= key <= INT64_MAX:
                check_key(key, f"{name}[{i}]")
        elif t is not str or not key:
            out[i] = check_key(key, f"{name}[{i}]")
    return out


def check_ordering_key(ordering_key: Any, name: str = "ordering_key") -> str:
    """An ordering key as str ("" = fall back to the key); ints become text."""
    if isinstance(ordering_key, str):
        return _check_text_size(str(ordering_key), name)
    if isinstance(ordering_key, int) and not isinstance(ordering_key, bool):
        return str(ordering_key)
    raise ValueError(f"{name} must be a str, an int or None; got {ordering_key!r}")


def as_bytes(value: Any, name: str = "value") -> bytes:
    """A value as bytes: bytes-like objects are copied, str is UTF-8 encoded.

    Raises:
        ValueError: naming `name` when the value is none of those.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise ValueError(f"{name} must be bytes (or bytearray, memoryview, str); "
                     f"got {type(value).__name__}")


def check_value_size(value: bytes, event_bytes_max: int, name: str = "the value") -> bytes:
    """A value no larger than the broker's event_bytes_max (which the producer does not
    know: a caller that does, or assumes the default, checks before sending anything).

    Raises:
        ValueError: in the broker's words, naming `name`, its size and the limit.
    """
    if len(value) > event_bytes_max:
        raise ValueError(value_size_error(name, len(value), event_bytes_max))
    return value


def extras_of(ordering_key: str | None, source: Any, opcode: Any, schema: Any, headers: Any,
              event_time_ms: Any) -> dict[str, Any]:
    """Validated non-default optional columns of one event, by field name.

    Raises:
        ValueError: naming the argument that is not allowed.
    """
    extras: dict[str, Any] = {}
    if ordering_key:
        extras["ordering_keys"] = ordering_key  # checked by check_ordering_key
    if source:
        extras["sources"] = _check_text_size(
            source if type(source) is str else _check_str(source, "source"), "source")
    if opcode:
        if opcode not in OPCODES or isinstance(opcode, bool):
            raise ValueError(f"opcode {opcode!r} is invalid: use UPSERT (0) or DELETE (1)")
        extras["opcodes"] = int(opcode)
    if schema:
        extras["schemas"] = _check_text_size(_check_str(schema, "schema"), "schema")
    if headers:
        extras["headers"] = check_headers(headers)
    if event_time_ms:
        extras["event_times_ms"] = _check_event_time(event_time_ms, "event_time_ms")
    return extras


def _check_event_time(value: Any, name: str) -> int:
    """An event time as the wire carries it (int64 milliseconds). Out of that range
    it was taken, and protobuf's "Value out of range" then failed the batch's flush
    on the event loop: the send's future never resolved and the producer sent
    nothing more."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an int (milliseconds); got {value!r:.60}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{name} is {value}: out of range; allowed {INT64_MIN}..{INT64_MAX} "
                         "(milliseconds, a signed 64-bit int)")
    return value


def event_columns(n: int, sources: Sequence[Any] | None = None,
                  opcodes: Sequence[Any] | None = None, schemas: Sequence[Any] | None = None,
                  headers: Sequence[Any] | None = None,
                  event_times_ms: Sequence[Any] | None = None) -> dict[str, list[Any]]:
    """Validated per-event optional columns of a bulk send, by EventBatch field name.

    Args:
        n: the number of events; every column given must have n entries.
        sources / schemas: str each ("" = none). opcodes: UPSERT (0) or
            DELETE (1) each. headers: a dict of str to bytes, or None, each.
        event_times_ms: int milliseconds each (0 = not set).
    Returns:
        One list per column given (None columns are left out), entries
        normalised as `extras_of` does; headers None becomes {}.
    Raises:
        ValueError: a length differs, or naming the first bad entry (sources[i]).
    """
    given = {"sources": sources, "opcodes": opcodes, "schemas": schemas, "headers": headers,
             "event_times_ms": event_times_ms}
    out: dict[str, list[Any]] = {}
    for name, column in given.items():
        if column is None:
            continue
        if isinstance(column, str | bytes | Mapping) or len(column) != n:
            size = len(column) if not isinstance(column, str | bytes | Mapping) else "not a list"
            raise ValueError(f"{name} must be a list with one entry per key ({n}); got {size}")
        out[name] = _check_column(name, column)
    return out


def _check_column(name: str, column: Sequence[Any]) -> list[Any]:
    if name in ("sources", "schemas"):
        return [_check_text_size(v if type(v) is str else _check_str(v, f"{name}[{i}]"),
                                 f"{name}[{i}]") for i, v in enumerate(column)]
    if name == "opcodes":
        for i, v in enumerate(column):
            if v not in OPCODES or type(v) is not int:
                raise ValueError(f"opcodes[{i}] is {v!r}: use UPSERT (0) or DELETE (1)")
        return list(column)
    if name == "headers":
        return [check_headers(v, f"headers[{i}]") if v else {} for i, v in enumerate(column)]
    return [_check_event_time(v, f"event_times_ms[{i}]") for i, v in enumerate(column)]


def _check_text_size(text: str, name: str) -> str:
    """`text`, if its UTF-8 fits TEXT_BYTES_MAX (the broker refuses the whole batch
    otherwise, other events of it included); encoded only when it could be over."""
    size = text_bytes_over(text)
    if size:
        raise ValueError(f"{name} is {size:,} bytes (UTF-8); an ordering key, "
                         f"source or schema is at most {TEXT_BYTES_MAX:,} bytes")
    return text


def _check_str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str; got {value!r}")
    return value


def check_headers(headers: Any, name: str = "headers") -> dict[str, bytes]:
    """Headers as dict[str, bytes] (str values are UTF-8 encoded)."""
    if not isinstance(headers, Mapping):
        raise ValueError(f"{name} must be a dict of str to bytes; got {type(headers).__name__}")
    out: dict[str, bytes] = {}
    for k, v in headers.items():
        if not isinstance(k, str):
            raise ValueError(f"{name} key {k!r} must be a str")
        out[k] = as_bytes(v, f"{name}[{k!r}]")
    return out


def check_columns(keys: Sequence[Any], values: Sequence[Any],
                   ordering_keys: Sequence[Any] | None) -> tuple[
                       list[int | str], list[bytes], list[str]]:
    """Validate bulk columns: equal lengths, keys, values, ordering keys."""
    if len(keys) != len(values):
        raise ValueError(f"keys has {len(keys)} entries and values {len(values)}; "
                         "they must have the same length")
    if ordering_keys is not None and len(ordering_keys) != len(keys):
        raise ValueError(f"ordering_keys has {len(ordering_keys)} entries; need "
                         f"{len(keys)} (one per key) or None")
    checked_values = [v if type(v) is bytes else as_bytes(v, f"values[{i}]")
                      for i, v in enumerate(values)]
    ordering = [check_ordering_key(o, f"ordering_keys[{i}]")
                for i, o in enumerate(ordering_keys or [])]
    return check_keys(keys, "keys"), checked_values, ordering


def check_sources(sources: Iterable[str] | None) -> list[str] | None:
    """Source names to read (None: every source), checked: a str is refused, since
    `list("orders")` would quietly read the sources 'o', 'r', 'd', ... ."""
    if sources is None:
        return None
    if isinstance(sources, str):
        raise ValueError(f"sources={sources!r} is a string; give a list such as [{sources!r}]")
    checked = list(sources)
    if not checked or len(set(checked)) != len(checked) or \
            not all(isinstance(s, str) for s in checked):
        raise ValueError(f"sources {checked!r} are invalid: need a non-empty list of distinct "
                         "source names (or None for every source)")
    return checked
