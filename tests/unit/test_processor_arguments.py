"""EventProcessor and SyncEventProcessor refuse bad arguments at construction.

Goal: every argument the docstring promises to check is refused before
anything is claimed or read, with a message naming the argument and what is
allowed; what used to be taken and fail later (or silently) is in the list:
a None or non-callable on_event, an async callback for the blocking
processor (never awaited: every event skipped), a bad events_max, namespace
or consumer group, a Redis ttl shorter than the expiration (partitions
reopened every cycle), start='bootstrap' (refused by a message offering it),
an offset past the wire's uint64 and an offset_reset that is not 'fail',
'earliest' or 'latest' (Kafka's 'none' included).
Method: construct against an unreachable address (nothing connects in the
constructor); a RedisOwnershipStore is built but never used.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdk.processor import EventProcessor, SyncEventProcessor
from sdk.processor.sync import _in_thread
from sdk.stores import RedisOwnershipStore

BROKER = "127.0.0.1:1"


async def on_event(context: Any, batch: Any) -> None:
    pass


def build(**options: Any) -> EventProcessor:
    topic = options.pop("topic", "orders")
    group = options.pop("group", "billing")
    options.setdefault("on_event", on_event)
    return EventProcessor(BROKER, topic, group, **options)


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"on_event": None}, TypeError, r"on_event=None is invalid: a function or a coroutine "
                                    r"function$"),
    ({"on_event": 5}, TypeError, "on_event=5 is invalid"),
    ({"on_error": "log"}, TypeError, r"on_error='log' is invalid: .*, or None"),
    ({"events_max": -1}, ValueError, r"events_max=-1 is invalid: an int 0\.\.4294967295"),
    ({"events_max": "x"}, ValueError, "events_max='x' is invalid"),
    ({"events_max": 1 << 32}, ValueError, "events_max=4294967296 is invalid"),
    ({"namespace": 5}, ValueError, "namespace 5 is invalid: a str of 0..255 bytes of printable"),
    ({"namespace": "a\nb"}, ValueError, "namespace 'a\\\\nb' is invalid"),
    ({"owner_id": ""}, ValueError, "owner_id '' is invalid: None .* unique per running"),
    ({"group": "bad group!"}, ValueError, r"consumer_group 'bad group!' is invalid: use "
                                          r"1\.\.255 characters from \[A-Za-z0-9\._-\]"),
    ({"group": "g" * 256}, ValueError, "consumer_group 'g+' is invalid"),
    ({"group": ""}, ValueError, "consumer_group '' is invalid"),
    ({"topic": "a/b"}, ValueError, "topic 'a/b' is invalid: the name of an existing topic"),
    ({"fencing": "yes"}, ValueError, "fencing='yes' is invalid: True, False or None"),
    ({"start": "bootstrap"}, ValueError, r"start 'bootstrap' is invalid: use 'earliest', "
                                         r"'latest', an offset 0\.\.2\*\*64-1, or "),
    ({"start": 1 << 64}, ValueError, r"start 18446744073709551616 is invalid"),
    ({"start": {0: "latest", 1: -5}}, ValueError, r"start\[1\] -5 is invalid"),
    ({"offset_reset": "none"}, ValueError, r"offset_reset='none' is invalid; allowed: 'fail', "
                                           r"'earliest', 'latest' \(what a partition whose "
                                           r"checkpoint is behind the log's start, past "
                                           r"its end or of a topic since deleted and "
                                           r"created again does\)"),
    ({"offset_reset": None}, ValueError, "offset_reset=None is invalid; allowed: 'fail'"),
], ids=lambda value: repr(value)[:40])
def test_a_bad_argument_is_refused_naming_it(options: dict[str, Any], error: type[Exception],
                                              message: str) -> None:
    with pytest.raises(error, match=message):
        build(**options)


def test_the_largest_start_offset_is_taken() -> None:
    assert build(start=(1 << 64) - 1).topic == "orders"


def test_a_redis_ttl_shorter_than_the_expiration_is_refused() -> None:
    store = RedisOwnershipStore("redis://127.0.0.1:1/0", ttl_ms=500)
    with pytest.raises(ValueError, match=r"RedisOwnershipStore ttl_ms=500 is shorter than "
                                         r"ownership_expiration_ms=5000: .* use ttl_ms >= "
                                         r"ownership_expiration_ms"):
        build(ownership_store=store, load_balancing_interval_ms=1000,
              ownership_expiration_ms=5000)
    with pytest.raises(ValueError, match="ttl_ms=4999 is shorter than ownership_expiration_ms"):
        build(ownership_store=RedisOwnershipStore("redis://127.0.0.1:1/0", ttl_ms=4999),
              load_balancing_interval_ms=1000, ownership_expiration_ms=5000)
    for ttl_ms in (5000, 60_000):  # equal (the usual) and longer are sound
        build(ownership_store=RedisOwnershipStore("redis://127.0.0.1:1/0", ttl_ms=ttl_ms),
              load_balancing_interval_ms=1000, ownership_expiration_ms=5000)


class AsyncCallable:
    async def __call__(self, context: Any, batch: Any) -> None:
        pass


@pytest.mark.parametrize("callback", [on_event, AsyncCallable()],
                         ids=["async def", "async __call__"])
def test_the_blocking_processor_refuses_a_coroutine_function(callback: Any) -> None:
    with pytest.raises(TypeError, match=r"is a coroutine function, which SyncEventProcessor "
                                        r"would never await; .* use EventProcessor"):
        SyncEventProcessor(BROKER, "orders", "billing", on_event=callback)
    with pytest.raises(TypeError, match="coroutine function"):
        SyncEventProcessor(BROKER, "orders", "billing", on_event=lambda c, b: None,
                           on_partition_close=callback)


def test_the_blocking_processor_refuses_a_missing_on_event() -> None:
    with pytest.raises(TypeError, match="on_event=None is invalid: a plain function"):
        SyncEventProcessor(BROKER, "orders", "billing", on_event=None)  # type: ignore[arg-type]


def test_a_blocking_callback_that_returns_a_coroutine_fails_loudly() -> None:
    """A plain function that returns a coroutine (a lambda around an async def)
    passes the construction check; running it must fail, not skip the work."""
    ran: list[bool] = []

    async def work() -> None:
        ran.append(True)

    wrapped = _in_thread(lambda context, batch: work(), lambda: asyncio.get_running_loop())
    assert wrapped is not None
    with pytest.raises(TypeError, match="returned an awaitable, which SyncEventProcessor never "
                                        "awaits"):
        asyncio.run(wrapped(None, "batch"))
    assert ran == []
