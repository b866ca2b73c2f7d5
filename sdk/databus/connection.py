"""The link both window sources keep to the broker: one channel, watched.

`ConnectionWatch` turns a long outage into one notice (consumers hear of it
through on_error, the log through a warning) and says whether the channel is
connected now; `BrokerLink` is what the log and Key_Shared sources share,
among it the first call to the broker (`describe_topic`): retried while no
broker is reached, said once at WARNING, bounded by connect_timeout_ms.
"""

from __future__ import annotations

import logging
import time

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import open_channel, retry_wait, stub_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus.config import DatabusConfig
from sdk.databus.inbox import Inbox
from sdk.reconnect import Link, RetryPolicy, failure_of
from sdk.security import ClientSecurity

_log = logging.getLogger("keybus.databus")


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ConnectionWatch:
    """Says once per outage that the channel has not been ready for `report_ms` (WARNING),
    and once that it is back (INFO, as the SDK's other clients say a return)."""

    def __init__(self, channel: grpc.aio.Channel, broker: str, report_ms: int) -> None:
        self.channel = channel
        self.broker = broker
        self.report_ms = report_ms
        self._down_since_ms: int | None = None
        self._reported = False

    def ready(self) -> bool:
        """Whether the channel is connected now."""
        return self.channel.get_state(try_to_connect=False) is grpc.ChannelConnectivity.READY

    def check(self, now_ms: int) -> Exception | None:
        """A notice to report now, or None."""
        state = self.channel.get_state(try_to_connect=False)
        if state is grpc.ChannelConnectivity.READY:
            if self._reported:
                _log.info("broker %s is reachable again; consumption goes on", self.broker)
            self._down_since_ms, self._reported = None, False
            return None
        if self._down_since_ms is None:
            self._down_since_ms = now_ms
        down_ms = now_ms - self._down_since_ms
        if self._reported or down_ms < self.report_ms:
            return None
        self._reported = True
        _log.warning("broker %s unreachable for %d ms; reconnecting", self.broker, down_ms)
        return errors.Unavailable(f"broker {self.broker} unreachable for {down_ms} ms "
                                  f"(channel {state.name}); still reconnecting, windows resume "
                                  "where they stopped")


class BrokerLink:
    """A window source's channel, its watch and its inbox (the sources extend it)."""

    def __init__(self, broker: str, topic: str, name: str, config: DatabusConfig,
                 need_slots: bool, security: ClientSecurity | None = None) -> None:
        self.broker = broker
        self.security = security
        self.topic = topic
        self.name = name
        self.config = config
        self.need_slots = need_slots
        self.inbox = Inbox(config.prefetch_windows_max)
        self._channel: grpc.aio.Channel | None = None
        self._watch: ConnectionWatch | None = None

    def _connect(self) -> grpc.aio.Channel:
        self._channel = open_channel(self.broker, self.security)
        self._watch = ConnectionWatch(self._channel, self.broker,
                                      self.config.unavailable_report_ms)
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
