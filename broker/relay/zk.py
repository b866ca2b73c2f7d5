"""The ZooKeeper session: a kazoo client seen from asyncio.

kazoo is threaded: its calls block and its state listener and watches run
on its own thread. Here blocking calls go to worker threads and every
callback is handed to the event loop, so election code stays on the loop.
The client reconnects by itself, forever; the session state is one of
CONNECTED, SUSPENDED (connection lost, session maybe alive), LOST (session
expired: every ephemeral node of it is gone) or NONE (not yet connected).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

log = logging.getLogger("keybus.zookeeper")
T = TypeVar("T")


class ZkSession:
    """One kazoo client; `on_change` runs on the loop after every state change."""

    def __init__(self, hosts: str, session_timeout_ms: int, on_change: Callable[[str], None]) -> None:
        self.hosts = hosts
        self._loop = asyncio.get_running_loop()
        self._on_change = on_change
        self.state = "NONE"
        # The connect retry never gives up (a follower's retries never stop
        # either); each attempt waits at most a session timeout.
        self.client = KazooClient(
            hosts=hosts, timeout=session_timeout_ms / 1000,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0))
        self.client.add_listener(self._listener)

    def start(self) -> None:
        """Connect in the background (never blocks; the state says when it is up)."""
        self.client.start_async()

    async def stop(self) -> None:
        """Close the session: ZooKeeper deletes its ephemeral nodes at once.

        With ZooKeeper unreachable this is quick too: kazoo stops reconnecting
        and fails every call still queued (ConnectionClosedError), which frees
        the threads of calls given up (`asyncio.wait_for`)."""
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.client.stop)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.client.close)

    @property
    def session_id(self) -> int | None:
        """The current session's id while CONNECTED."""
        if self.state != "CONNECTED":
            return None
        client_id = self.client.client_id
        return int(client_id[0]) if client_id else None

    def _listener(self, state: KazooState) -> None:
        # kazoo's thread: hand over, never block here.
        self._loop.call_soon_threadsafe(self._changed, str(state))

    def _changed(self, state: str) -> None:
        if state == self.state:
            return
        level = logging.INFO if state == "CONNECTED" else logging.WARNING
        log.log(level, "zookeeper %s: session %s", self.hosts, state)
        self.state = state
        self._on_change(state)

    def watcher(self, event: asyncio.Event) -> Callable[[Any], None]:
        """A kazoo watch function that sets `event` on the loop."""
        loop = self._loop

        def watch(_: Any) -> None:
            loop.call_soon_threadsafe(event.set)
        return watch

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking kazoo call on a worker thread."""
        return await asyncio.to_thread(fn, *args, **kwargs)


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def loads(data: bytes | None) -> Any:
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError:
        return {}


# What a ZooKeeper call fails with when the connection or session is gone.
ZK_ERRORS: tuple[type[Exception], ...] = (KazooException, KazooTimeoutError)
