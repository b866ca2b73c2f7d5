"""SubscriptionAdmin refuses bad arguments before any call, naming them.

Goal: a partition list or a name that is not what the wire carries gets a
ValueError saying what is allowed; before, protobuf answered "Value out of
range: -1" or "bad argument type for built-in operation", and a subscription
of None went out as "" (the broker then named no subscription). Method: an
Admin pointed at a closed port on 127.0.0.1, so any call that got through
would fail differently (Unavailable), never with these words.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from keybus.dev_cluster import free_port
from sdk.admin import Admin

Call = Callable[[Admin], Awaitable[Any]]


@pytest.mark.parametrize(("call", "words"), [
    (lambda a: a.seek("t", "s", 0, partitions=[-1]), r"partitions=\[-1\] is invalid"),
    (lambda a: a.seek("t", "s", 0, partitions=1), r"partitions=1 is invalid: give a list"),
    (lambda a: a.seek("t", "s", 0, partitions=["x"]), r"partition 'x' is not an int"),
    (lambda a: a.seek("t", None, 0), r"subscription None is invalid: give a name"),
    (lambda a: a.delete_subscription("t", 5), r"subscription 5 is invalid: give a name"),
    (lambda a: a.describe_subscription(7, "s"), r"topic 7 is invalid: give a name"),
    (lambda a: a.list_subscriptions(None), r"topic None is invalid: give a name"),
])
def test_bad_arguments_are_refused_before_the_call(call: Call, words: str) -> None:
    async def go() -> None:
        async with Admin(f"127.0.0.1:{free_port()}", request_timeout_ms=2_000) as admin:
            with pytest.raises(ValueError, match=words):
                await call(admin)

    asyncio.run(go())
