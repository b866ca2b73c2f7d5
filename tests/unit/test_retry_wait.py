"""sdk.channel.retry_wait: a retry waits for its channel, not its whole backoff.

Goal: a channel that was down when the attempt failed ends the wait as soon as
it connects again; a connected channel (the broker answered and refused)
sleeps the whole delay, so a refusing broker is not asked again at once; no
channel sleeps the delay. Method: a bare grpc.aio server on 127.0.0.1 (no
services: only the connection matters), started on a closed port during the
wait.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import grpc.aio

from sdk.channel import open_channel, retry_wait
from tests.support.broker_process import free_port


async def _server(port: int) -> grpc.aio.Server:
    server = grpc.aio.server()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server


def test_a_channel_that_was_down_ends_the_wait_when_it_connects() -> None:
    async def go() -> float:
        port = free_port()
        channel = open_channel(f"127.0.0.1:{port}")
        servers: list[grpc.aio.Server] = []

        async def serve_soon() -> None:
            await asyncio.sleep(0.3)
            servers.append(await _server(port))

        began = time.monotonic()
        starting = asyncio.create_task(serve_soon())
        await retry_wait(channel, 30_000)
        waited = time.monotonic() - began
        await starting
        assert channel.get_state() is grpc.ChannelConnectivity.READY
        await channel.close()
        await servers[0].stop(None)
        return waited

    # the server is up 0.3 s in; gRPC's next connection attempt comes within its
    # reconnect backoff (at most 1 s) of that, far from the 30 s delay
    assert asyncio.run(go()) < 15


def test_a_connected_channel_sleeps_the_whole_delay() -> None:
    async def go() -> float:
        port = free_port()
        server = await _server(port)
        channel = open_channel(f"127.0.0.1:{port}")
        await asyncio.wait_for(channel.channel_ready(), 10)
        began = time.monotonic()
        await retry_wait(channel, 300)
        waited = time.monotonic() - began
        await channel.close()
        await server.stop(None)
        return waited

    assert asyncio.run(go()) >= 0.29


def test_no_channel_sleeps_the_delay() -> None:
    async def go() -> float:
        began = time.monotonic()
        await retry_wait(None, 200)
        return time.monotonic() - began

    assert asyncio.run(go()) >= 0.19


def test_a_channel_connected_when_the_wait_began_ends_it_when_it_connects_again() -> None:
    """A call fails on a lost connection a moment before the channel's state leaves
    READY: the wait sees READY, and must still end once the broker serves again."""
    async def go() -> float:
        port = free_port()
        first = await _server(port)
        channel = open_channel(f"127.0.0.1:{port}")
        await asyncio.wait_for(channel.channel_ready(), 10)
        servers: list[grpc.aio.Server] = []

        async def restart_soon() -> None:
            await first.stop(None)  # the connection drops after the wait began
            await asyncio.sleep(0.3)
            servers.append(await _server(port))

        began = time.monotonic()
        restarting = asyncio.create_task(restart_soon())
        await retry_wait(channel, 30_000)
        waited = time.monotonic() - began
        await restarting
        assert channel.get_state() is grpc.ChannelConnectivity.READY
        await channel.close()
        await servers[0].stop(None)
        return waited

    assert asyncio.run(go()) < 15
