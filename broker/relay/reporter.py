"""A follower's durable positions, streamed to its upstream (`ReportReplicaPositions`).

The leader answers a produce with `acks = n` once n followers reported a
position at or past it. Only the latest position per partition is sent: a
report supersedes the ones before it. The stream reconnects with capped
backoff, forever, like the copy itself; the backoff starts over once a
stream is acknowledged (it worked), and a working stream the upstream ended
because the follower's token expired is opened again at once, with the token
read anew (as the SDK's rule 6). Else every expiry doubled the wait, and
after a few rotations of a short-lived token the leader counted no follower
for up to `relay_retry_backoff_max_ms` at each expiry (acks = n produces
stalled that long). Anything else that breaks the loop is
supervised (`broker.supervision.supervise`): logged with its traceback once
per distinct cause, then the loop runs again after the same backoff's range,
with a new stream that sends every partition's latest position again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import grpc.aio

from broker.relay.backoff import Backoff
from broker.supervision import RestartBackoff, nothing_to_fail, nothing_to_reload, supervise
from sdk.channel import stub_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.reconnect import reauthenticates

log = logging.getLogger("keybus.relay")


class PositionReporter:
    """Sends the latest position of each partition of one topic to the upstream."""

    def __init__(self, channel: grpc.aio.Channel, topic: str, broker_id: str, address: str,
                 backoff: Backoff,
                 pause: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """`pause(seconds)` waits before a retry (a follower's wakes on a new token)."""
        self._stub = stub_of(channel)
        self._pause = pause
        self.topic = topic
        self.broker_id = broker_id
        self.address = address
        self._backoff = backoff
        self._latest: dict[int, tuple[int, int]] = {}  # partition -> (end_offset, epoch)
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        name = f"relay-report {self.topic}"
        restart = RestartBackoff(self._backoff.first_ms, self._backoff.max_ms)
        self._task = asyncio.get_running_loop().create_task(
            supervise(name, self._run, nothing_to_fail, nothing_to_reload, restart, log),
            name=name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def report(self, partition: int, end_offset: int, leader_epoch: int) -> None:
        """Queue the partition's durable end (sent as soon as the stream is free)."""
        self._latest[partition] = (end_offset, leader_epoch)
        self._changed.set()

    async def _positions(self) -> AsyncIterator[pb.ReplicaPosition]:
        sent: dict[int, tuple[int, int]] = {}
        while True:
            self._changed.clear()
            for partition, position in list(self._latest.items()):
                if sent.get(partition) != position:
                    sent[partition] = position
                    yield pb.ReplicaPosition(topic=self.topic, partition=partition,
                                             broker_id=self.broker_id, address=self.address,
                                             end_offset=position[0], leader_epoch=position[1])
            await self._changed.wait()

    async def _run(self) -> None:
        while True:
            acked = False
            try:
                async for _ in self._stub.ReportReplicaPositions(self._positions()):
                    if not acked:  # one ack per position: read so the stream never backs up
                        acked = True
                        self._backoff.reset()
            except grpc.aio.AioRpcError as e:
                if acked and reauthenticates(e):
                    log.debug("position stream of %s: token expired; reopened", self.topic)
                    continue
                delay_ms = self._backoff.next_ms()
                log.debug("position stream of %s to its upstream broke (%s); retry in %d ms",
                          self.topic, e.code().name, delay_ms)
                await self._pause(delay_ms / 1000)
                continue
            self._backoff.reset()
