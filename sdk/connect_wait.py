"""A client's first call waits for its channel to connect, for a bounded time.

Why: a broker that took the TCP connection and never answers (a stopped or hung
process: the kernel accepts for it) would otherwise hold the first call until
the keepalive ping gives up (about 15 s) or the call's deadline ends, and be
told as "cannot connect — is it running?". Waiting at most `timeout_s` for the
channel, then probing the port once, tells it within seconds and in the right
words. A channel that is connected, or failed to connect (refused), lets the
call go at once: its own error is the right one then.
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import parse_broker

_CONNECTING = (grpc.ChannelConnectivity.IDLE, grpc.ChannelConnectivity.CONNECTING)


async def wait_connected(channel: grpc.aio.Channel, broker: str, timeout_s: float) -> bool:
    """Wait until `channel` is connected or has failed to connect; whether it is connected.

    Raises:
        Unavailable: still connecting after `timeout_s`, worded by whether the
            broker's port takes a TCP connection (frozen) or not (no answer).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    state = channel.get_state(try_to_connect=True)
    while state in _CONNECTING:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise await _silent(broker, timeout_s)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(remaining):
                await channel.wait_for_state_change(state)
        state = channel.get_state(try_to_connect=True)
    return state is grpc.ChannelConnectivity.READY


async def _silent(broker: str, timeout_s: float) -> errors.Unavailable:
    """The error for a channel still connecting after `timeout_s`."""
    waited = f"within {timeout_s:g} s"
    host, port = parse_broker(broker)
    try:  # bounded: only tells a port that takes connections from one that does not
        async with asyncio.timeout(1.0):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return errors.unreachable(broker, f"no answer (connect timed out {waited})")
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return errors.unreachable(broker, f"{errors.ACCEPTED_SILENT} {waited}")
