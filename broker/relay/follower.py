"""Chaining: copy a topic from an upstream broker, partition by partition.

One `TopicFollower` per chained topic: a copy task per partition, a position
reporter and a cursor sync loop, on one channel to the upstream. A copy task
(the seed's "consumer that writes to the event buffer"):

1. Handshake: ask the upstream where its log stops agreeing with ours
   (`EpochEnd` for the epoch of our last record) and drop what lies past it
   (events the leader never had, so never acknowledged); it is logged.
   Then compare the last record kept with the upstream's at that offset
   (divergence.py): when they differ, or when the upstream, leading in the
   epoch of our last record, ends at or below our start, the upstream holds
   another log (the topic was deleted and created again there): the whole
   copy is dropped and the log starts over at offset 0, as a new topic's
   (replica_log.py rule 6, whatever our start was), so the copy takes the
   upstream's log from its start.
2. Read the upstream through the SDK `Reader` from our log end (from the
   beginning of its retained log when ours is empty), following its tail,
   and store each response's whole records in one write
   (`replica_log.replicate`): same offsets, SCNs, producer state.
3. Report the new durable end to the upstream (acks = n); also once right
   after the handshake, so a leader counts the follower before it copies.

When the upstream's retention removed offsets before they were copied (its
read answers OUT_OF_RANGE: we were stopped or slower than its retention),
the copy restarts at the upstream's start offset (`replica_log.restart_at`,
Kafka's reset to the leader's log start offset): one WARNING names the
offsets that could not be copied, `keybus_relay_follower_resets` counts it,
and the copy goes on at once. A compacted view of the partition is marked
first and loaded from the upstream's (view_load.py), as when an empty log's
first record comes past its start.

A failure of any step is logged and retried from 1 after a capped,
doubling backoff (`relay_retry_backoff_ms` .. `relay_retry_backoff_max_ms`,
the seed's one minute); retries never stop. A stream the upstream ended
because the token expired is opened again at once with the token read anew
from `relay_token_file` (the SDK's rule 6); an upstream that refuses the
follower's credentials is said once per topic, and the retry comes as soon as
the token file changes (upstream_auth.py). With `stop_offsets` (an elected
leader catching up from a peer) a partition's copy ends there.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping

import grpc
import grpc.aio

from broker.errors import BrokerError
from broker.log.codec import CorruptRecord
from broker.partition import Partition
from broker.relay import divergence, incarnation, replica_log, view_load, watermark
from broker.relay.backoff import Backoff
from broker.relay.copy_state import CopyState, wall_ms
from broker.relay.cursor_sync import SubscriptionCarrier, sync_once
from broker.relay.metrics import COPIED_EVENTS, FOLLOWER_RESETS, TRUNCATED_EVENTS
from broker.relay.replica_log import ReplicaError
from broker.relay.reporter import PositionReporter
from broker.relay.settings import RelaySettings
from broker.relay.upstream_auth import UpstreamAuth
from broker.relay.upstream_failure import in_relay_words
from broker.topics import TopicRegistry
from broker.view.load import ViewSource
from sdk import errors
from sdk.channel import open_channel, stub_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.reader import Reader
from sdk.subscription_admin import SubscriptionAdmin

log = logging.getLogger("keybus.relay")
# What a copy attempt may fail with; anything else is a bug and is logged with its trace.
_RETRIED = (errors.KeybusError, BrokerError, ReplicaError, CorruptRecord, grpc.RpcError, OSError)
OnTruncated = Callable[[str, int, int], Awaitable[None]]  # (topic, partition, new end)


async def _nothing(_: Partition) -> None:
    """Queued behind a copy's writes: when it runs, they have run."""


class TopicFollower:
    """Copies one topic from `upstream` (see the module docstring)."""

    def __init__(self, topic: str, upstream: str, leader_epoch: int, registry: TopicRegistry,
                 relay: RelaySettings, carrier: SubscriptionCarrier | None,
                 on_truncated: OnTruncated | None = None,
                 stop_offsets: Mapping[int, int] | None = None) -> None:
        self.topic = topic
        self.upstream = upstream
        self.leader_epoch = leader_epoch
        self.registry = registry
        self.relay = relay
        self.carrier = carrier
        self.on_truncated = on_truncated
        self.stop_offsets = dict(stop_offsets or {})
        self.states: dict[int, CopyState] = {}
        self.error = ""  # why setting up the copy failed last ("" once it is set up)
        self.unreachable_since_ms = 0  # wall clock of the setup's first failure; 0 = set up
        self._channel: grpc.aio.Channel | None = None
        self._reporter: PositionReporter | None = None
        self._task: asyncio.Task[None] | None = None
        self._sources: dict[int, ViewSource] = {}  # attached to this topic's views
        self._incarnation_lock = asyncio.Lock()
        self.auth = UpstreamAuth(topic, upstream, relay.client_security)

    def _backoff(self) -> Backoff:
        return Backoff(self.relay.backoff_first_ms, self.relay.backoff_max_ms)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._channel = open_channel(self.upstream, self.relay.client_security)
        self._reporter = PositionReporter(self._channel, self.topic, self.relay.broker_id,
                                          self.relay.address, self._backoff(),
                                          pause=self.auth.pause)
        self._task = asyncio.get_running_loop().create_task(
            self._main(), name=f"relay-follow {self.topic} from {self.upstream}")
        log.info("topic %s: chaining from %s (leader epoch %d)", self.topic, self.upstream,
                 self.leader_epoch)

    async def stop(self) -> None:
        """Stop copying; what was copied stays (no partial window is ever stored).

        Returns once no write of this copy is left on a partition's queue, so the
        log ends read next (a candidacy, a claim) are final.
        """
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for index in self.states:
            with contextlib.suppress(BrokerError):
                await self.registry.partition(self.topic, index).run_on_task(_nothing)
        for index, source in self._sources.items():
            view = view_load.view_of(self.registry, self.topic, index)
            if view is not None:
                view.detach_source(source)
        if self._reporter is not None:
            await self._reporter.stop()
        if self._channel is not None:
            await self._channel.close()

    def failure(self) -> str:
        """Why the copy is not going now, in words ("" when it is): describe's detail."""
        if self.error:
            return self.error
        failing = sorted((i, state.error) for i, state in self.states.items() if state.error)
        return "; ".join(f"copy of partition {i} from {self.upstream} failed ({error})"
                         for i, error in failing[:2]) + ("; ..." if len(failing) > 2 else "")

    async def wait_done(self) -> None:
        """Wait until every partition's copy reached its stop offset (catch-up)."""
        assert self._task is not None
        await asyncio.shield(self._task)

    # ------------------------------------------------------------ the copy

    async def _main(self) -> None:
        backoff = self._backoff()
        while True:
            try:
                partitions = await self._ensure_topic()
                self.error = ""
                self.unreachable_since_ms = 0
                self.auth.accepted()
                break
            except _RETRIED as e:
                delay_ms = backoff.next_ms()
                self.error = f"cannot set up the copy from {self.upstream} ({in_relay_words(e)})"
                self.unreachable_since_ms = self.unreachable_since_ms or wall_ms()
                if self.auth.refused(e):
                    self.error += f"; {self.auth.fix()}"
                else:
                    log.warning("topic %s: %s; retry in %d ms", self.topic, self.error, delay_ms)
                await self.auth.pause(delay_ms / 1000)
        assert self._reporter is not None and self._channel is not None
        self._reporter.start()
        for p in partitions:
            view = view_load.view_of(self.registry, self.topic, p.index)
            if view is not None and self._wanted(p.index):
                source = view_load.upstream_source(self._channel, self.upstream, self.topic,
                                                   p.index)
                self._sources[p.index] = source
                view.attach_source(source)
        tasks = [self._copy_loop(p) for p in partitions if self._wanted(p.index)]
        if self.carrier is not None and not self.stop_offsets:
            tasks.append(self._sync_loop())
        await asyncio.gather(*tasks)

    def _wanted(self, index: int) -> bool:
        if not self.stop_offsets:
            return True
        return index in self.stop_offsets

    async def _describe_upstream(self) -> pb.TopicInfo:
        """The upstream's view of the topic (its partitions' offsets)."""
        assert self._channel is not None
        try:
            info: pb.TopicInfo = await stub_of(self._channel).DescribeTopic(
                pb.DescribeTopicRequest(topic=self.topic), timeout=10)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        return info

    async def _ensure_topic(self) -> list[Partition]:
        """The local topic, created like the upstream's when missing."""
        info = await self._describe_upstream()
        if self.topic not in self.registry.names():
            with contextlib.suppress(BrokerError):  # created meanwhile: checked below
                await self.registry.create(self.topic, info.config, info.incarnation)
                log.info("topic %s: created like upstream %s (%d partitions)", self.topic,
                         self.upstream, info.config.partitions)
        partitions = self.registry.partitions(self.topic)
        if len(partitions) != info.config.partitions:
            raise ReplicaError(f"topic {self.topic!r} has {len(partitions)} partitions here and "
                               f"{info.config.partitions} on upstream {self.upstream}; a "
                               "follower needs the same number")
        empty = all(p.log_end == p.start_offset for p in partitions)
        await self._judge_incarnation(info.incarnation, False, empty)
        return partitions

    async def _copy_loop(self, partition: Partition) -> None:
        state = self.states.setdefault(partition.index, CopyState())
        backoff = self._backoff()
        while not state.done:
            try:
                await self._handshake(partition)
                # What it holds now agrees with the upstream's log: report it at once, so
                # a leader counts it as following before anything is copied (acks.py).
                assert self._reporter is not None
                self._reporter.report(partition.index, partition.log_end, self.leader_epoch)
                await self._copy(partition, state, backoff)
            except Exception as e:  # never stops; a bug is logged with its trace
                state.process_lost(in_relay_words(e), wall_ms())
                delay_ms = backoff.next_ms()
                if self.auth.refused(e):  # said once for the topic, not per partition and try
                    state.error += f"; {self.auth.fix()}"
                    await self.auth.pause(delay_ms / 1000)
                    continue
                log.log(logging.WARNING if isinstance(e, _RETRIED) else logging.ERROR,
                        "topic %s/%d: copy from upstream %s failed (%s); retry in %d ms", self.topic,
                        partition.index, self.upstream, state.error, delay_ms,
                        exc_info=not isinstance(e, _RETRIED))
                await asyncio.sleep(delay_ms / 1000)

    async def _handshake(self, partition: Partition) -> None:
        """Drop the tail the upstream's log does not have (step 1)."""
        if partition.log_end == partition.start_offset:
            return
        store, topic_id = partition.store, partition.meta.topic_id
        epoch = await asyncio.to_thread(replica_log.last_epoch, store, topic_id,
                                        partition.index, partition.log_end)
        assert self._channel is not None
        try:
            answer = await stub_of(self._channel).EpochEnd(pb.EpochEndRequest(
                topic=self.topic, partition=partition.index, leader_epoch=epoch), timeout=10)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        self.auth.accepted()
        if await self._drop_another_log(partition, answer.end_offset, epoch,
                                        answer.incarnation):
            return
        if answer.end_offset >= partition.log_end:
            return
        dropped = await self._truncate(partition, answer.end_offset)
        if dropped is not None:
            log.warning("topic %s/%d: dropped offsets %d..%d (%d events in %d records, scn %d..%d) "
                        "that upstream %s does not have (leader epoch %d ended at %d); they were "
                        "never acknowledged", self.topic, partition.index, dropped.offset,
                        dropped.end_before - 1, dropped.events, dropped.records,
                        dropped.scn_first, dropped.scn_last, self.upstream, epoch,
                        answer.end_offset)

    async def _drop_another_log(self, partition: Partition, epoch_end: int, epoch: int,
                                theirs: str) -> bool:
        """Step 1b (divergence.py): when the upstream's record holding the last offset
        both logs may share is not ours, or the upstream, leading in the epoch of our
        last record, holds nothing of this copy (`epoch_end`, its answer, is at or
        below our start), its log is another one (the topic was deleted and created
        again there): drop the whole copy, so the log starts over at 0 and the
        upstream's is copied from its start (rule 6 of replica_log.py). So too, for
        every partition, when the upstream's topic is another incarnation
        (`theirs`; incarnation.py), whatever the records say. True when it did."""
        reason, agreed = await self._another_log(partition, min(epoch_end, partition.log_end),
                                                 epoch)
        if await self._judge_incarnation(theirs, agreed, False):
            return True
        if reason is None:
            return False
        dropped = await self._truncate(partition, partition.start_offset)
        if dropped is not None:
            log.warning("topic %s/%d: upstream %s holds another log of this partition than the "
                        "one copied here (%s): the topic was deleted and created again there, or "
                        "its data replaced; dropped offsets %d..%d (%d events in %d records), "
                        "this log starts over at 0 and copies the upstream's log from its start",
                        self.topic, partition.index, self.upstream, reason, dropped.offset,
                        dropped.end_before - 1, dropped.events, dropped.records)
        return True

    async def _truncate(self, partition: Partition, offset: int
                        ) -> replica_log.Truncation | None:
        """Drop the log from `offset` on (replica_log.truncate, on the partition's
        task), counted in the metrics; what was dropped, for the caller's log line."""
        callback = self._truncated_callback(partition.index)
        dropped: replica_log.Truncation | None = await partition.run_on_task(
            lambda p: replica_log.truncate(p, offset, callback))
        if dropped is not None:
            TRUNCATED_EVENTS.labels(self.topic).inc(dropped.events)
        return dropped

    async def _another_log(self, partition: Partition, keep_end: int,
                           epoch: int) -> tuple[str | None, bool]:
        """Why the upstream's log is another one than this copy, in words (None when
        it is the same as far as it can tell, or the upstream has a later leader),
        and whether a record both hold was compared and agrees."""
        if keep_end <= partition.start_offset:  # no record of ours the upstream may hold
            if epoch != self.leader_epoch:  # a later leader lacks our tail: truncation
                return None, False
            return (f"its log ends at offset {keep_end} in leader epoch {epoch}, the epoch of "
                    f"this copy's last record, and this copy holds offsets "
                    f"{partition.start_offset}..{partition.log_end - 1}"), False
        store, topic_id = partition.store, partition.meta.topic_id
        ours = await asyncio.to_thread(divergence.our_mark, store, topic_id, partition.index,
                                       keep_end - 1)
        if ours is None:
            return None, False
        assert self._channel is not None
        theirs = await divergence.upstream_mark(self._channel, self.topic, partition.index,
                                                ours.base_offset)
        return divergence.diverged(ours, theirs), theirs == ours

    async def _judge_incarnation(self, theirs: str, agreed: bool, empty: bool) -> bool:
        """Act on the upstream's incarnation (incarnation.py): take it, or drop every
        partition's copy and then take it. True when the copies were dropped."""
        async with self._incarnation_lock:  # one partition's handshake at a time
            meta = self.registry.meta(self.topic)
            ours = meta.incarnation
            verdict = incarnation.judge("" if meta.incarnation_backfilled else ours, theirs,
                                        agreed, empty)
            if verdict == "same":
                return False
            if verdict == "another":
                for partition in self.registry.partitions(self.topic):
                    dropped = await partition.run_on_task(functools.partial(
                        replica_log.start_over,
                        before_publish=self._truncated_callback(partition.index)))
                    what = ("nothing was copied yet" if dropped is None else
                            f"dropped offsets {dropped.offset}..{dropped.end_before - 1} "
                            f"({dropped.events} events in {dropped.records} records)")
                    if dropped is not None:
                        TRUNCATED_EVENTS.labels(self.topic).inc(dropped.events)
                    log.warning("%s", incarnation.another_message(
                        self.topic, partition.index, self.upstream, ours, theirs, what))
            self.registry.set_incarnation(self.topic, theirs)
            log.info("topic %s: incarnation %r, upstream %s's (was %r)", self.topic, theirs,
                     self.upstream, ours)
            return verdict == "another"

    def _truncated_callback(self, index: int) -> Callable[[int], Awaitable[None]] | None:
        on_truncated = self.on_truncated
        if on_truncated is None:
            return None
        return lambda end: on_truncated(self.topic, index, end)

    async def _copy(self, partition: Partition, state: CopyState, backoff: Backoff) -> None:
        """Follow the upstream and store what it sends (steps 2-3) until an error."""
        start: int | str = partition.log_end
        if partition.log_end == partition.start_offset:
            start = "earliest"
        stop = self.stop_offsets.get(partition.index)
        if stop is not None and partition.log_end >= stop:
            state.done = True
            return
        reader = Reader(self.upstream, self.topic, partition.index, start=start, follow=True,
                        stop_offset=stop, retry_backoff_ms=self.relay.backoff_first_ms,
                        retry_backoff_max_ms=self.relay.backoff_max_ms, channel=self._channel,
                        replica=True,
                        on_connection_change=lambda connected, message: self._stream_changed(
                            state, reader, connected, message))
        # The upstream's high watermark, sent with the records and when only it moves.
        reader.on_high_watermark = functools.partial(watermark.advance, partition)
        # An answer without records (the tail reached, or an idle upstream's):
        # the upstream is heard, and its log end known.
        reader.on_tail = lambda _: state.process_answer(reader.end_offset or 0,
                                                        partition.log_end, wall_ms())
        try:
            await self._follow(partition, state, backoff, reader)
        except errors.KeybusError as e:  # offsets retention removed upstream: restart there
            if e.code != errors.OUT_OF_RANGE or not await self._restart_behind(partition):
                raise
            return
        state.done = stop is not None

    async def _follow(self, partition: Partition, state: CopyState, backoff: Backoff,
                      reader: Reader) -> None:
        """Store what `reader` brings until it ends (step 2). Before the first records
        of each stream it opens (again: the Reader resumes a lost one by itself, with
        no handshake), the upstream's topic must still be this copy's incarnation."""
        checked = -1  # reader.reconnects when the incarnation was last checked
        async with reader:
            async for batch in reader:
                records = [batch.record, *(b.record for b in reader.drain_buffered())]
                if reader.reconnects != checked:
                    checked = reader.reconnects
                    await self._check_same_topic()
                first = records[0].base_offset
                if partition.log_end == partition.start_offset < first:  # an empty log's
                    await view_load.hold(self.registry, partition, first)  # start moves on
                plan = await partition.run_on_task(
                    lambda p, records=records: replica_log.replicate(p, records))  # type: ignore[misc]
                COPIED_EVENTS.labels(self.topic).inc(plan.events)
                state.process_answer(reader.end_offset or 0, partition.log_end, wall_ms())
                self.auth.accepted()
                backoff.reset()
                assert self._reporter is not None
                self._reporter.report(partition.index, partition.log_end, self.leader_epoch)

    async def _check_same_topic(self) -> None:
        """Raises ReplicaError (nothing of the stream is stored) when the upstream's
        topic is another incarnation than this copy's; the retry's handshake then
        drops the copy (incarnation.py)."""
        theirs = (await self._describe_upstream()).incarnation
        meta = self.registry.meta(self.topic)
        ours = "" if meta.incarnation_backfilled else meta.incarnation
        if incarnation.judge(ours, theirs, False, False) == "another":
            raise ReplicaError(f"upstream {self.upstream} now holds incarnation {theirs!r} of "
                               f"the topic, not {ours!r} (deleted and created again there); "
                               "nothing of it was stored here")

    def _stream_changed(self, state: CopyState, reader: Reader, connected: bool,
                        message: str) -> None:
        """The Reader lost its stream to the upstream (it retries by itself, forever:
        the copy loop sees no failure) or has it back. A loss is said as a failed copy
        is, with the status code and the upstream's words (upstream_failure.py), so an
        upstream gone (UNAVAILABLE: connection refused) is told from one that refused
        (UNAVAILABLE: <its reason>, another code), and marks the partition's upstream
        unreachable until its next answer."""
        where = f"topic {self.topic}/{reader.partition}"
        if connected:
            log.info("%s: %s; copying", where, message)  # "the broker at H:P is back after"
            return
        failure = reader.last_failure
        reason = in_relay_words(failure) if failure is not None else message
        state.process_lost(reason, wall_ms())
        log.warning("%s: lost the stream from upstream %s (%s); retrying", where,
                    self.upstream, reason)

    async def _restart_behind(self, partition: Partition) -> bool:
        """After an OUT_OF_RANGE read: when the upstream's start is past our log end,
        restart the copy there (rule 5 of replica_log.py) and say so; False when it
        is not (another cause: the copy fails and is retried as any failure)."""
        info = await self._describe_upstream()
        starts = [p.start_offset for p in info.partitions if p.partition == partition.index]
        if not starts or starts[0] <= partition.log_end:
            return False
        await view_load.hold(self.registry, partition, starts[0])  # before the log's restart
        restart = await partition.run_on_task(
            lambda p: replica_log.restart_at(p, starts[0]))
        if restart is None:
            return False
        FOLLOWER_RESETS.labels(self.topic, str(partition.index)).inc()
        held = (f"; offsets {restart.start_before}..{restart.end_before - 1} held here were "
                f"dropped" if restart.end_before > restart.start_before else "")
        log.warning("topic %s/%d: offsets %d..%d were removed by retention on upstream %s "
                    "before this follower copied them; its copy now starts at %d, the upstream's "
                    "start (readers here get OUT_OF_RANGE below it, as there%s)", self.topic,
                    partition.index, restart.end_before, restart.start - 1, self.upstream,
                    restart.start, held)
        assert self._reporter is not None
        self._reporter.report(partition.index, partition.log_end, self.leader_epoch)
        return True

    async def _sync_loop(self) -> None:
        """Mirror the upstream's subscription cursors (cursor_sync.py), forever."""
        assert self._channel is not None and self.carrier is not None
        admin = SubscriptionAdmin(channel=self._channel, request_timeout_ms=10_000)
        while True:
            await asyncio.sleep(self.relay.sync_interval_ms / 1000)
            try:
                upstream = await admin.list_subscriptions(self.topic)
                ends = {p.index: p.end_offset for p in self.registry.partitions(self.topic)}
                plan = await sync_once(upstream, self.carrier, self.topic, ends)
            except _RETRIED as e:
                log.debug("topic %s: cursor sync from %s failed (%s); next round in %d ms",
                          self.topic, self.upstream, e, self.relay.sync_interval_ms)
                continue
            if plan.create:
                log.info("topic %s: subscriptions %s copied from %s", self.topic,
                         ", ".join(i.subscription for i in plan.create), self.upstream)
