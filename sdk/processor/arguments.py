"""What EventProcessor and SyncEventProcessor refuse at construction.

A bad argument found later costs more: a None on_event consumed every event
unprocessed, an async callback given to the blocking processor was never
awaited (every event skipped), a bad consumer group was refused only by the
broker after the claims were made in Redis, and a Redis ttl shorter than the
expiration let two processors run one partition. Each check raises
ValueError (TypeError for a callback of the wrong kind) naming the argument
and what is allowed. Pure: no I/O.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import Any

from sdk.core.names import NAME_CHARACTERS, PROCESSOR_NAME_BYTES_MAX, is_name, is_text
from sdk.core.wire_ints import UINT32_MAX
from sdk.processor.balancer import STRATEGIES
from sdk.processor.offset_reset import check_offset_reset
from sdk.processor.pump import StartPositions, start_for
from sdk.reader import start_to_proto
from sdk.stores.fencing import fences

EVENTS_MAX = UINT32_MAX  # ReadRequest.events_max is a uint32
TOPIC_NAME_BYTES_MAX = 249  # the broker's default topic_name_bytes_max


def check_names(topic: Any, consumer_group: Any, namespace: Any, owner_id: Any) -> None:
    """The broker's name rules (sdk.core.names), before anything is claimed."""
    if not is_name(topic, TOPIC_NAME_BYTES_MAX):
        raise ValueError(f"topic {topic!r} is invalid: the name of an existing topic "
                         f"(1..{TOPIC_NAME_BYTES_MAX} characters from {NAME_CHARACTERS})")
    if not is_name(consumer_group, PROCESSOR_NAME_BYTES_MAX):
        raise ValueError(f"consumer_group {consumer_group!r} is invalid: use "
                         f"1..{PROCESSOR_NAME_BYTES_MAX} characters from {NAME_CHARACTERS}")
    if not is_text(namespace, PROCESSOR_NAME_BYTES_MAX, empty_ok=True):
        raise ValueError(f"namespace {namespace!r} is invalid: a str of "
                         f"0..{PROCESSOR_NAME_BYTES_MAX} bytes of printable UTF-8 text")
    if owner_id is not None and not is_text(owner_id, PROCESSOR_NAME_BYTES_MAX, empty_ok=False):
        raise ValueError(f"owner_id {owner_id!r} is invalid: None (a new UUID) or a str of "
                         f"1..{PROCESSOR_NAME_BYTES_MAX} bytes of printable UTF-8 text, unique "
                         "per running processor")


def check_callbacks(callbacks: Mapping[str, Any], blocking: bool) -> None:
    """on_event is required; every callback is callable (or None where optional).

    Args:
        callbacks: name -> callback, on_event first.
        blocking: SyncEventProcessor's: a coroutine function would only be
            called on a worker thread, never awaited, so it is refused.
    Raises:
        TypeError: naming the callback and what is allowed.
    """
    kind = "a plain function (run on a worker thread)" if blocking else \
        "a function or a coroutine function"
    for name, callback in callbacks.items():
        if callback is None and name != "on_event":
            continue
        if not callable(callback):
            raise TypeError(f"{name}={callback!r} is invalid: {kind}"
                            + ("" if name == "on_event" else ", or None"))
        if blocking and is_coroutine_function(callback):
            raise TypeError(f"{name}={getattr(callback, '__name__', callback)!r} is a coroutine "
                            "function, which SyncEventProcessor would never await; give a plain "
                            "function, or use EventProcessor for async callbacks")


def is_coroutine_function(callback: Any) -> bool:
    """An `async def` function or method, or an object whose __call__ is one."""
    return inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(
        getattr(callback, "__call__", None))  # noqa: B004 - the method itself is what is asked


def check_balancing(strategy: Any, interval_ms: Any, expiration_ms: Any,
                    ownership_store: Any) -> None:
    """Strategy, interval and expiration, and an ownership store's own record
    lifetime (`ttl_ms`, e.g. RedisOwnershipStore's) against the expiration."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} is invalid; allowed: {', '.join(STRATEGIES)}")
    if type(interval_ms) is not int or interval_ms <= 0:
        raise ValueError(f"load_balancing_interval_ms={interval_ms!r} is invalid: a positive int")
    if type(expiration_ms) is not int or expiration_ms <= interval_ms:
        raise ValueError(f"ownership_expiration_ms={expiration_ms!r} is invalid: an int above "
                         f"load_balancing_interval_ms ({interval_ms}); several intervals is usual")
    ttl_ms = getattr(ownership_store, "ttl_ms", None)
    if type(ttl_ms) is int and ttl_ms < expiration_ms:
        # A holder stops processing once its claim is expiration_ms old by its own clock;
        # a record that vanishes sooner lets another processor take the partition while
        # the holder still runs it (and under one interval, every renewal fails).
        raise ValueError(
            f"{type(ownership_store).__name__} ttl_ms={ttl_ms} is shorter than "
            f"ownership_expiration_ms={expiration_ms}: its records would vanish before the "
            "claims expire, so another processor could take a partition its owner still "
            "processes, and renewals fail (partitions reopen, replaying events); use "
            "ttl_ms >= ownership_expiration_ms (equal is usual)")


def check_start(start: StartPositions) -> None:
    """One Start for all partitions, or a mapping partition -> Start."""
    if isinstance(start, Mapping) and set(start) != {"scn"}:
        for partition in start:
            if type(partition) is not int or partition < 0:
                raise ValueError(f"start key {partition!r} is invalid: a partition >= 0")
            start_to_proto(start_for(start, partition), f"start[{partition}]")
    else:
        start_to_proto(start_for(start, 0))  # raises ValueError naming what is allowed


def check_options(events_max: Any, fencing: Any) -> None:
    if type(events_max) is not int or not 0 <= events_max <= EVENTS_MAX:
        raise ValueError(f"events_max={events_max!r} is invalid: an int 0..{EVENTS_MAX} "
                         "(0: the broker's default; the broker refuses more than its cap)")
    if fencing is not None and type(fencing) is not bool:
        raise ValueError(f"fencing={fencing!r} is invalid: True, False or None (on when the "
                         "checkpoint store can fence)")


def renamed_start(start: StartPositions, start_position: StartPositions | None
                  ) -> StartPositions:
    """`start_position` is the deprecated spelling of `start` (warned at the caller's caller)."""
    if start_position is None:
        return start
    warnings.warn("EventProcessor(start_position=...) is now start=... (the same name as "
                  "Reader's and Consumer's)", DeprecationWarning, stacklevel=3)
    return start_position


def check_processor(topic: Any, consumer_group: Any, namespace: Any, owner_id: Any,
                    callbacks: Mapping[str, Any], strategy: Any, interval_ms: Any,
                    expiration_ms: Any, ownership_store: Any, checkpoint_store: Any,
                    start: StartPositions, events_max: Any, fencing: Any,
                    offset_reset: Any) -> None:
    """Every check of EventProcessor's arguments, in the order of its signature."""
    check_names(topic, consumer_group, namespace, owner_id)
    check_callbacks(callbacks, blocking=False)
    check_balancing(strategy, interval_ms, expiration_ms, ownership_store)
    check_start(start)
    check_options(events_max, fencing)
    check_offset_reset(offset_reset)
    if fencing and checkpoint_store is not None and not fences(checkpoint_store):
        raise ValueError(f"fencing=True but {type(checkpoint_store).__name__} cannot fence "
                         "(supports_fencing is false); pass fencing=False")
