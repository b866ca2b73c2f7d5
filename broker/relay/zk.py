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
import concurrent.futures
import functools
import json
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

from broker.relay.zk_lines import KazooLog, Outage
from broker.supervision import describe_cause

log = logging.getLogger("keybus.zookeeper")
T = TypeVar("T")
ZK_CALL_THREADS = 4


class ZkSession:
    """One kazoo client; `on_change` runs on the loop after every state change."""

    def __init__(self, hosts: str, session_timeout_ms: int, on_change: Callable[[str], None]) -> None:
        self.hosts = hosts
        self._loop = asyncio.get_running_loop()
        self._on_change = on_change
        self.state = "NONE"
        self._timeout_ms = session_timeout_ms
        self._closing = False  # stop() began: LOST is the close, said by stop() itself
        self._kazoo_state = "NONE"  # as kazoo's thread saw it last
        self._closed_from: str | None = None  # the state before LOST: CONNECTED = a clean close
        self._session = 0  # the id of the session last CONNECTED, until it is LOST
        # The connect retry never gives up (a follower's retries never stop
        # either); each attempt waits at most a session timeout. Its lines about
        # each attempt are said once per outage (zk_lines.py), not every second.
        self._kazoo_log = KazooLog()
        self.client = KazooClient(
            hosts=hosts, timeout=session_timeout_ms / 1000,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0),
            logger=self._kazoo_log)
        self.client.add_listener(self._listener)
        # Blocking calls run here, not on asyncio's default executor (6 threads on 2
        # cores), which serves the broker's log reads: with ZooKeeper unanswering a call
        # waits until kazoo drops the connection (about a session timeout), and the
        # elections of many topics would hold every default thread meanwhile. kazoo
        # sends every call down one connection, so a few threads are as fast as many.
        self._calls = concurrent.futures.ThreadPoolExecutor(
            max_workers=ZK_CALL_THREADS, thread_name_prefix="zookeeper-call")

    def start(self) -> None:
        """Connect in the background (never blocks; the state says when it is up)."""
        self.client.start_async()

    async def stop(self) -> bool:
        """Close the session, within zookeeper_session_timeout_ms; True when ZooKeeper
        answered the close (it deleted this session's ephemeral nodes at once).

        kazoo's `stop()` sends the close and joins its connection thread, which
        with ZooKeeper paused (its port takes connections, nothing answers) ends
        only when kazoo's own read or connect timeout fires; it runs on a daemon
        thread joined with a bound, so a stop never waits past the bound and the
        process can exit with it still running. A close not answered leaves the
        ephemeral nodes (its live nodes and any leader node) to ZooKeeper's expiry of the
        session, which is said on the log: other brokers take over only then.
        """
        self._closing = True
        session_id = self._session
        stopper = threading.Thread(target=self._stop_client, name="zookeeper-stop", daemon=True)
        stopper.start()
        await asyncio.to_thread(stopper.join, self._timeout_ms / 1000)
        if not session_id:
            log.info("zookeeper %s: no session to close (none established, or it expired)",
                     self.hosts)
            return True
        if stopper.is_alive():
            log.warning("zookeeper %s: session 0x%x not closed: ZooKeeper did not answer within "
                        "zookeeper_session_timeout_ms=%d; it keeps this session's ephemeral "
                        "nodes (its live nodes and any leader node) until it expires the "
                        "session, and other brokers take over what this one led only then",
                        self.hosts, session_id, self._timeout_ms)
            return False
        if self._closed_from == "CONNECTED":
            log.info("zookeeper %s: session 0x%x closed", self.hosts, session_id)
            return True
        log.warning("zookeeper %s: session 0x%x not closed: the connection was %s, not "
                    "CONNECTED, when the close was due; ZooKeeper keeps this session's "
                    "ephemeral nodes (its live nodes and any leader node) until it expires the "
                    "session "
                    "(zookeeper_session_timeout_ms=%d after its last answer), and other "
                    "brokers take over what this one led only then", self.hosts, session_id,
                    self._closed_from or self.state, self._timeout_ms)
        return False

    def _stop_client(self) -> None:
        """kazoo's stop and close (blocking; see `stop`), then the call threads' end (a
        call still waiting fails with the closed connection first)."""
        try:
            self.client.stop()
            self.client.close()
        except Exception as e:  # the thread's last word: said, not raised into nowhere
            log.warning("zookeeper %s: closing the client failed (%s: %s)", self.hosts,
                        type(e).__name__, e)
        finally:
            self._calls.shutdown(wait=False, cancel_futures=True)

    @property
    def session_id(self) -> int | None:
        """The current session's id while CONNECTED."""
        if self.state != "CONNECTED":
            return None
        client_id = self.client.client_id
        return int(client_id[0]) if client_id else None

    def _listener(self, state: KazooState) -> None:
        # kazoo's thread: note what a close came from, hand over, never block here.
        # kazoo goes CONNECTED -> LOST only when ZooKeeper answered the close; a close
        # with the connection down goes through SUSPENDED.
        if str(state) == "LOST" and self._closing and self._closed_from is None:
            self._closed_from = self._kazoo_state
        elif str(state) == "LOST":
            self._session = 0  # expired: nothing left to close
        outage = None
        if str(state) == "CONNECTED":
            client_id = self.client.client_id
            self._session = int(client_id[0]) if client_id else 0
            outage = self._kazoo_log.connected()
        self._kazoo_state = str(state)
        self._loop.call_soon_threadsafe(self._changed, str(state), outage)

    def _changed(self, state: str, outage: Outage | None = None) -> None:
        if state == self.state:
            return
        level = logging.INFO if state == "CONNECTED" or self._closing else logging.WARNING
        if outage is None:
            log.log(level, "zookeeper %s: session %s", self.hosts, state)
        else:  # what kazoo's lines said once: how long, how many attempts
            log.log(level, "zookeeper %s: session %s after %.1f s of failed connection "
                    "attempts (%d failed; kazoo's line for each repeat is at DEBUG)",
                    self.hosts, state, outage.seconds, outage.failed)
        self.state = state
        self._on_change(state)

    def watcher(self, event: asyncio.Event) -> Callable[[Any], None]:
        """A kazoo watch function that sets `event` on the loop."""
        loop = self._loop

        def watch(_: Any) -> None:
            loop.call_soon_threadsafe(event.set)
        return watch

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking kazoo call on one of the session's own threads (see __init__)."""
        return await self._loop.run_in_executor(self._calls, functools.partial(fn, *args, **kwargs))


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def loads(data: bytes | None) -> Any:
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError:
        return {}


def describe_zk_error(error: BaseException) -> str:
    """One line naming a failed ZooKeeper call; kazoo's ConnectionLoss has no message."""
    if str(error):
        return describe_cause(error)
    return f"{type(error).__name__}: the connection to ZooKeeper dropped before it answered"


# What a ZooKeeper call fails with when the connection or session is gone.
ZK_ERRORS: tuple[type[Exception], ...] = (KazooException, KazooTimeoutError)
