"""Receiving a set of values from a consumer in tests: bounded, acked, and failing
with how many are missing."""

from __future__ import annotations

import time

from sdk.consumer import Consumer


async def receive_values(consumer: Consumer, wanted: set[bytes], timeout_s: float, *,
                         only_wanted: bool = False) -> None:
    """Receive (and ack) until every value of `wanted` came, within `timeout_s`.
    `only_wanted`: any other value is an error (e.g. one a failed seek moved back to)."""
    got: set[bytes] = set()
    deadline = time.monotonic() + timeout_s
    while not wanted <= got:
        left = deadline - time.monotonic()
        assert left > 0, f"missing {len(wanted - got)} of {len(wanted)}"
        try:
            message = await consumer.receive(timeout_s=left)
        except TimeoutError:
            raise AssertionError(f"missing {len(wanted - got)} of {len(wanted)}") from None
        if only_wanted:
            assert message.value in wanted, f"{message.value!r} delivered, not asked for"
        got.add(message.value)
        consumer.ack(message)


async def received_until_idle(consumer: Consumer, idle_s: float) -> list[int]:
    """Offsets handed out (and acked) until `idle_s` passes without one."""
    offsets = []
    while True:
        try:
            message = await consumer.receive(idle_s)
        except TimeoutError:
            return offsets
        offsets.append(message.offset)
        consumer.ack(message)
