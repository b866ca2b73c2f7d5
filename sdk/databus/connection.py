"""The link both window sources keep to the broker: one channel, watched.

`ConnectionWatch` turns a long outage into one notice (consumers hear of it
through on_error) and says whether the channel is connected now; `BrokerLink`
is what the log and Key_Shared sources share: the channel, its watch and the
registration's one account of an outage (`LinkOutage`: its streams and the
watch see the same broker go, and it is said once, its return once),
among it the first call to the broker (`describe_topic`): retried while no
broker is reached, said once at WARNING, bounded by connect_timeout_ms.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import open_channel, retry_wait, stub_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus.config import DatabusConfig
from sdk.databus.inbox import Inbox
from sdk.databus.outage import LinkOutage
from sdk.reconnect import ConnectionCallback, Link, RetryPolicy, failure_of
from sdk.security import ClientSecurity

_log = logging.getLogger("keybus.databus")


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ConnectionWatch:
    """Tells `say(False, message)` once per outage that the channel has not been ready
    for `report_ms`, and `say(True, message)` once that it is back (the link folds
    these with its streams' reports: LinkOutage)."""

    def __init__(self, channel: grpc.aio.Channel, broker: str, report_ms: int,
                 say: Callable[[bool, str], None]) -> None:
        self.channel = channel
        self.broker = broker
        self.report_ms = report_ms
        self.say = say
        self._down_since_ms: int | None = None
        self._reported = False
        self._ever_ready = False  # never connected: the broker cannot be "lost", nor "back"

    def ready(self) -> bool:
        """Whether the channel is connected now."""
        return self.channel.get_state(try_to_connect=False) is grpc.ChannelConnectivity.READY

    def check(self, now_ms: int) -> Exception | None:
        """A notice to report now, or None."""
        state = self.channel.get_state(try_to_connect=False)
        if state is grpc.ChannelConnectivity.READY:
            if self._reported and self._down_since_ms is not None:
                waited_s = (now_ms - self._down_since_ms) / 1000
                self.say(True, f"the broker at {self.broker} is back after {waited_s:.1f} s"
                         if self._ever_ready else
                         f"reached the broker at {self.broker} after {waited_s:.1f} s")
            self._down_since_ms, self._reported, self._ever_ready = None, False, True
            return None
        if self._down_since_ms is None:
            self._down_since_ms = now_ms
        down_ms = now_ms - self._down_since_ms
        if self._reported or down_ms < self.report_ms:
            return None
        self._reported = True
        if not self._ever_ready:  # as the Reader words it (sdk/reconnect.py, rule 1)
            self.say(False, f"cannot reach broker at {self.broker} (not connected after "
                            f"{down_ms} ms); retrying")
            return errors.Unavailable(f"cannot reach broker at {self.broker} (not connected "
                                      f"after {down_ms} ms, channel {state.name}); still trying")
        self.say(False, f"lost the broker at {self.broker} (unreachable for {down_ms} ms); "
                        "retrying")
        return errors.Unavailable(f"broker {self.broker} unreachable for {down_ms} ms "
                                  f"(channel {state.name}); still reconnecting, windows resume "
                                  "where they stopped")


class BrokerLink:
    """A window source's channel, its watch and its inbox (the sources extend it)."""

    def __init__(self, broker: str, topic: str, name: str, config: DatabusConfig,
                 need_slots: bool, security: ClientSecurity | None = None,
                 on_connection_change: ConnectionCallback | None = None) -> None:
        self.broker = broker
        self.security = security
        self.topic = topic
        self.name = name
        self.config = config
        self.need_slots = need_slots
        self.inbox = Inbox(config.prefetch_windows_max)
        self._channel: grpc.aio.Channel | None = None
        self._watch: ConnectionWatch | None = None
        self._outage = LinkOutage(name)
        self._on_connection_change = on_connection_change
        self._reports: set[asyncio.Future[Any]] = set()  # the callback's coroutines running

    def connection_changed(self, connected: bool, message: str) -> None:
        """What a stream (a Reader, the Consumer) or the watch saw, said once per
        outage: the first loss and the first return after it go to the
        application's on_connection_change (the SDK's own words), else to the log
        (WARNING, INFO); the other streams' reports of the same outage are DEBUG."""
        said = (self._outage.process_back(message) if connected
                else self._outage.process_lost(message))
        if not said.news or self._on_connection_change is None:
            _log.log(said.level, "%s", said.line)
            return
        result = self._on_connection_change(connected, said.message)
        if inspect.isawaitable(result):
            future = asyncio.ensure_future(result)
            self._reports.add(future)
            future.add_done_callback(self._reports.discard)

    def _connect(self) -> grpc.aio.Channel:
        self._channel = open_channel(self.broker, self.security)
        self._watch = ConnectionWatch(self._channel, self.broker,
                                      self.config.unavailable_report_ms, self.connection_changed)
        return self._channel

    def health(self, now: int) -> Exception | None:
        """A notice when the broker has been unreachable for long (once per outage)."""
        return self._watch.check(now) if self._watch is not None else None

    async def describe_topic(self) -> pb.TopicInfo:
        """The topic's partitions and where their logs start: both sources' first call
        to the broker (the Key_Shared one makes it before subscribing, so that both
        wait for a broker alike and say so alike). A call that reached no broker (refused, unknown host) is
        retried with the SDK's backoff for `connect_timeout_ms` (sdk/reconnect.py, rule
        1), so a client started with its broker waits for it; the log says so once.
        An answer from a broker (no such topic, no permission) fails at once.

        Raises:
            TopicNotFound, KeybusError: the broker's answer. Unavailable: no
                broker reached within connect_timeout_ms.
        """
        assert self._channel is not None
        stub = stub_of(self._channel)
        link = Link(self.broker, RetryPolicy(connect_timeout_ms=self.config.connect_timeout_ms))
        said = False
        while True:
            try:
                info: pb.TopicInfo = await stub.DescribeTopic(
                    pb.DescribeTopicRequest(topic=self.topic), timeout=30)
                self._outage.process_reached()
                return info
            except grpc.RpcError as e:
                reason, never_reached = failure_of(e)
                if not never_reached:
                    raise errors.from_rpc_error(e, self.broker) from None
            delay_ms, _ = link.process_failure(reason, True, now_ms())  # Unavailable: gave up
            if not said:  # once per start; a long wait reaches on_error (unavailable_report_ms)
                said = True
                _log.warning("%s: cannot reach broker %s yet (%s); retrying %s", self.name,
                             self.broker, reason, _plan(self.config.connect_timeout_ms))
            await retry_wait(self._channel, delay_ms)

    async def _disconnect(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


def _plan(connect_timeout_ms: int) -> str:
    if not connect_timeout_ms:
        return "until it answers (connect_timeout_ms=0)"
    return f"for up to {connect_timeout_ms / 1000:g} s (connect_timeout_ms={connect_timeout_ms})"
