"""This broker's place in a cluster: per replicated topic, its role, copy and acks.

The one object the RPC shell and the partitions call:

* `check_writable(topic)`: refuses produce unless this broker leads the topic
  and knows it does (InitProducer; and every partition's write guard,
  `check_producible`, which also refuses what too few followers would copy);
* `acknowledged(topic, partition, end_offset)`: waits, before a produce is
  answered, until `acks` followers hold it; refuses it while leadership is
  unconfirmed (the fail-safe: after a lost ZooKeeper connection nothing is
  acknowledged, and what waits is answered at once, see `unconfirm`);
* `report(position)`, `epoch_end(...)`, `describe(...)`: the relay RPCs.

Roles change through `become_leader`, `become_follower`, `become_candidate`
(static configuration at start, the ZooKeeper election later). A change
keeps the log, the subscriptions and the reads in flight: only the copy
task starts or stops, and produce is refused or taken. One transition per
topic at a time (a lock per topic). A compacted view marked to be loaded
from an upstream that will never come (the broker leads the topic, or
restarted with no replication entry for it) is folded from the log at that
change or at start (broker/relay/view_load.py, `fold_reason`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from broker.errors import BrokerError
from broker.partition import Partition, TopicMeta
from broker.relay import replica_log, view_load, watermark
from broker.relay.acks import AckTracker
from broker.relay.copy_state import wall_ms
from broker.relay.cursor_sync import SubscriptionCarrier
from broker.relay.describe import cluster_info
from broker.relay.election_core import ElectionLike
from broker.relay.follower import TopicFollower
from broker.relay.following_log import log_changes
from broker.relay.metrics import IS_LEADER, LEADER_CHANGES, drop_is_leader
from broker.relay.settings import RelaySettings, TopicReplication
from broker.relay.sweep import SWEEP_INTERVAL_S, sweep
from broker.relay.tasks import RelayTasks
from broker.relay.topic_role import TopicRole
from broker.supervision import describe_cause
from broker.topics import TopicRegistry
from sdk import errors
from sdk.admin import Admin
from sdk.core.pb import keybus_pb2 as pb

log = logging.getLogger("keybus.relay")


class RelayNode:
    """See the module docstring."""

    def __init__(self, registry: TopicRegistry, carrier: SubscriptionCarrier | None,
                 relay: RelaySettings) -> None:
        self.registry = registry
        self.carrier = carrier
        self.relay = relay
        self.roles: dict[str, TopicRole] = {}
        self.election: ElectionLike | None = None
        self._tasks = RelayTasks(relay.backoff_first_ms, relay.backoff_max_ms)
        self._started = False
        self._pending: list[str] = []  # topics met before start(): their role waits for it

    # ------------------------------------------------------------ lifecycle

    def attach(self, relay: RelaySettings) -> None:
        """Guard every partition before the server takes its first request: until
        `start()` a replicated topic refuses produce (no leader known yet)."""
        self.relay = relay
        self.registry.start_listeners.append(self._topic_started)
        self.registry.delete_listeners.append(self._topic_deleted)
        for name in self.registry.names():
            self._topic_started(self.registry.meta(name), self.registry.partitions(name))

    async def start(self) -> None:
        """Take up the configured roles of every topic; start the election if any."""
        if self.relay.zookeeper:
            from broker.relay.election import ZkElection

            self.election = ZkElection(self)
            await self.election.start()
        self._started = True
        for name in self.registry.names():  # a view marked before a restart, its role gone
            if name not in self.roles:  # (a topic with a role decides at its role changes)
                await view_load.fold_without_upstream(self.registry, name,
                                                      self.relay.for_topic(name), "")
        for name in self._pending:
            self._take_up(name)
        self._pending.clear()
        for name, replication in self.relay.topics.items():
            if name != "*" and replication.upstream and name not in self.roles:
                self._follow_missing(name, replication)  # the copy creates it here
        default = self.relay.topics.get("*")
        if default is not None and default.upstream:
            self._tasks.spawn("relay-discover", functools.partial(self._discover, default))
        self._tasks.spawn("relay-sweep", self._sweep_loop)

    async def stop(self) -> None:
        """Hand leadership over (ZooKeeper), stop every copy; the log stays."""
        if self.election is not None:
            await self.election.stop()
        self._tasks.cancel()
        for role in self.roles.values():
            if role.follower is not None:
                await role.follower.stop()
            self._end_leadership(role, "the broker is stopping")

    def _spawn_role(self, topic: str, change: Callable[[], Awaitable[None]]) -> None:
        """Run a static role change, retried until it succeeds: while it waits the
        topic is a candidate whose detail names the cause (produce is refused with it)."""
        def failed(error: Exception, retry_ms: int) -> None:
            role = self.roles[topic]
            detail = f"taking up its role failed ({describe_cause(error)}); retry in {retry_ms} ms"
            self._end_leadership(role, detail)
            role.role, role.detail = "candidate", detail  # the retry redoes the whole change
            IS_LEADER.labels(topic).set(0)

        self._tasks.spawn(f"relay-role {topic}", change, failed)

    async def _sweep_loop(self) -> None:
        """Gauges and the leader's following-set lines, once a second (sweep.py)."""
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            sweep(self)

    def _add_role(self, topic: str, replication: TopicReplication) -> None:
        """A candidate until taken up: is_leader 0 (not leading), never no series."""
        self.roles[topic] = TopicRole(topic, replication)
        IS_LEADER.labels(topic).set(0)

    def _follow_missing(self, topic: str, replication: TopicReplication) -> None:
        self._add_role(topic, replication)
        self._spawn_role(topic, functools.partial(self.become_follower, topic,
                                                  replication.upstream, 0))

    async def _discover(self, replication: TopicReplication) -> None:
        """`"*"` chained from an upstream: follow every topic it has, as it gets them."""
        admin = Admin(replication.upstream, request_timeout_ms=10_000,
                      security=self.relay.client_security)
        try:
            while True:
                with contextlib.suppress(errors.KeybusError):
                    for info in await admin.list_topics():
                        if info.topic not in self.roles and self.relay.for_topic(info.topic) \
                                is replication:
                            self._follow_missing(info.topic, replication)
                await asyncio.sleep(self.relay.sync_interval_ms / 1000)
        finally:
            await admin.close()

    def _topic_started(self, meta: TopicMeta, partitions: list[Partition]) -> None:
        """A topic was loaded or created: guard its partitions, take up its role."""
        for partition in partitions:
            partition.write_guard = functools.partial(self.check_producible, meta.name,
                                                      partition.index)
        replication = self.relay.for_topic(meta.name)
        if replication is None:  # no entry: it leads the topic, as a single broker does,
            IS_LEADER.labels(meta.name).set(1)  # and followers may copy from it
            return
        if meta.name in self.roles:
            return
        watermark.hold_back(partitions)
        self._add_role(meta.name, replication)
        if self._started:
            self._take_up(meta.name)
        else:
            self._pending.append(meta.name)

    async def _topic_deleted(self, topic: str) -> None:
        """A role-less topic's series goes with it; a role (and its series) outlives the log."""
        if topic not in self.roles:
            drop_is_leader(topic)

    def _take_up(self, topic: str) -> None:
        replication = self.roles[topic].replication
        if replication.election == "zookeeper":
            assert self.election is not None
            self.election.join(topic)
        elif replication.upstream:
            self._spawn_role(topic, functools.partial(self.become_follower, topic,
                                                      replication.upstream, 0))
        else:
            self._spawn_role(topic, functools.partial(self.become_leader, topic, 0))

    # ------------------------------------------------------------ produce path

    def check_writable(self, topic: str) -> None:
        """Raise unless this broker may take produce for `topic` now."""
        role = self.roles.get(topic)
        if role is None:
            return
        if role.role == "leader" and not role.stopping:
            if not role.confirmed:
                raise BrokerError("leadership_unconfirmed", broker=self.relay.address, topic=topic)
            return
        if role.role == "follower" and role.leader:
            raise BrokerError("not_leader", broker=self.relay.address, topic=topic,
                              leader=role.leader)
        raise BrokerError("leader_unknown", topic=topic,
                          detail="the leader is stopping" if role.stopping else role.detail)

    def check_producible(self, topic: str, partition: int) -> None:
        """`check_writable`; and refuse at once, before storing, what too few followers
        would copy (acks.py rules 4-5, Kafka's NOT_ENOUGH_REPLICAS), not after acks_timeout_ms."""
        self.check_writable(topic)
        role = self.roles.get(topic)
        tracker = role.trackers.get(partition) if role is not None else None
        now_ms = time.monotonic() * 1000
        if role is not None and tracker is not None and tracker.short_of_followers(
                now_ms, now_ms - role.led_since * 1000, self.relay.acks_timeout_ms):
            raise BrokerError("followers_missing", topic=topic, partition=partition,
                              copies=tracker.copies, following=tracker.following(now_ms),
                              broker=self.relay.address)

    async def acknowledged(self, topic: str, partition: int, end_offset: int) -> None:
        """Return once the events below end_offset may be acknowledged.

        Raises:
            BrokerError: acks_timeout, leadership_unconfirmed or leadership_lost.
        """
        role = self.roles.get(topic)
        if role is None:
            return
        epoch = role.epoch
        timeout_s = self.relay.acks_timeout_ms / 1000
        tracker = role.trackers.get(partition)
        if role.role == "leader" and role.confirmed and tracker is not None and tracker.copies:
            await self._wait_copies(role, tracker, partition, end_offset, timeout_s)
        if role.role == "leader" and role.epoch == epoch and not role.confirmed:
            raise BrokerError("leadership_unconfirmed", broker=self.relay.address, topic=topic)
        if role.role != "leader" or role.epoch != epoch:
            raise BrokerError("leadership_lost", broker=self.relay.address, topic=topic,
                              offset=end_offset)

    async def _wait_copies(self, role: TopicRole, tracker: AckTracker[asyncio.Future[None]],
                           partition: int, end_offset: int, timeout_s: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if tracker.add(end_offset, future):
            return
        # Nobody may await it after a timeout: never log its exception as unretrieved.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(future)
        except TimeoutError:
            have = sum(1 for end in tracker.positions.values() if end >= end_offset)
            raise BrokerError("acks_timeout", have=have, copies=tracker.copies, topic=role.topic,
                              partition=partition, offset=end_offset,
                              timeout=self.relay.acks_timeout_ms) from None

    # ------------------------------------------------------------ relay RPCs

    def report(self, position: pb.ReplicaPosition, stream: object) -> None:
        """A follower's durable position, come on `stream` (it follows while that is open);
        releases produces waiting for copies."""
        role = self.roles.get(position.topic)
        if role is None or role.role != "leader" or position.leader_epoch != role.epoch:
            return  # not ours to count (a chained follower's, an old epoch's)
        role.reports[position.broker_id, position.partition] = (
            position.address, position.end_offset, wall_ms())
        tracker = role.trackers.get(position.partition)
        if tracker is None:
            return
        if tracker.attach(position.broker_id, stream):  # a new stream: who follows may change
            log_changes(role, position.partition, tracker, time.monotonic() * 1000)
        for future in tracker.process_position(position.broker_id, position.end_offset):
            if not future.done():
                future.set_result(None)
        with contextlib.suppress(BrokerError):
            watermark.advance(self.registry.partition(role.topic, position.partition),
                              tracker.acked_end())

    def reports_ended(self, stream: object) -> None:
        """A report stream closed: its follower follows no more through it, but for
        `relay_follower_grace_ms` (it may reopen at once: a token expiry, a blip)."""
        now_ms = time.monotonic() * 1000
        for role in self.roles.values():
            for index, tracker in role.trackers.items():
                tracker.detach(stream, now_ms)
                if role.role == "leader":  # with no grace it stopped following now
                    log_changes(role, index, tracker, now_ms)

    async def epoch_end(self, request: pb.EpochEndRequest) -> pb.EpochEndResponse:
        partition = self.registry.partition(request.topic, request.partition)
        end = await asyncio.to_thread(replica_log.epoch_end, partition.store,
                                      partition.meta.topic_id, partition.index,
                                      partition.start_offset, partition.log_end,
                                      request.leader_epoch)
        role = self.roles.get(request.topic)
        epoch = role.epoch if role is not None and role.role == "leader" else 0
        return pb.EpochEndResponse(end_offset=end, leader_epoch=epoch,
                                   incarnation=partition.meta.incarnation)

    def describe(self, topic: str) -> pb.ClusterInfo:
        session = self.election.session_state if self.election is not None else "NONE"
        # every topic: those held here, and those it is set to copy but could not create
        # yet (an upstream away: its role's detail says why)
        names = [topic] if topic else sorted({*self.registry.names(), *self.roles})
        return cluster_info(self, names, session)

    # ------------------------------------------------------------ transitions

    async def become_leader(self, topic: str, epoch: int) -> None:
        """Lead `topic` under `epoch`: stop copying, take produce, count copies."""
        role = self.roles[topic]
        async with role.lock:
            changed = role.role != "leader" or role.epoch != epoch
            if role.follower is not None:
                await role.follower.stop()
                role.follower = None
            # no upstream to load a marked view from now
            await view_load.fold_without_upstream(self.registry, topic, role.replication,
                                                  "leader")
            if changed:
                partitions = self.registry.partitions(topic)
                for partition in partitions:
                    partition.leader_epoch = epoch
                role.trackers = {p.index: AckTracker(role.replication.acks,
                                                     self.relay.follower_grace_ms)
                                 for p in partitions}
                watermark.lead(partitions, role.replication.acks)
                role.reports.clear()
                role.led_since = time.monotonic()
                self._count_change(role, epoch)
                log.info("topic %s: leading (leader epoch %d, acks %s)", topic, epoch,
                         role.replication.acks or "leader")
            role.role, role.leader, role.epoch, role.detail = "leader", self.relay.address, epoch, ""
            role.stopping = False
            self.confirm(topic)
            IS_LEADER.labels(topic).set(1)

    async def become_follower(self, topic: str, leader: str, epoch: int) -> None:
        """Copy `topic` from `leader` (no-op when already doing exactly that)."""
        role = self.roles[topic]
        async with role.lock:
            if role.role == "follower" and role.leader == leader and role.epoch == epoch \
                    and role.follower is not None:
                return
            self._end_leadership(role, f"the leader is now {leader}")
            if role.follower is not None:
                await role.follower.stop()
            self._count_change(role, epoch)
            with contextlib.suppress(BrokerError):  # a missing topic: the copy creates it
                watermark.follow(self.registry.partitions(topic))
            role.role, role.leader, role.epoch = "follower", leader, epoch
            role.detail = f"copying from {leader}"
            role.follower = TopicFollower(topic, leader, epoch, self.registry, self.relay,
                                          self.carrier, self._truncated)
            role.follower.start()
            IS_LEADER.labels(topic).set(0)

    async def become_candidate(self, topic: str, detail: str) -> None:
        """No known leader: stop copying and refuse produce (the log stays)."""
        role = self.roles[topic]
        async with role.lock:
            self._end_leadership(role, detail)
            if role.follower is not None:
                await role.follower.stop()
                role.follower = None
            with contextlib.suppress(BrokerError):
                watermark.follow(self.registry.partitions(topic))
            if role.role != "candidate":
                log.info("topic %s: no leader (%s)", topic, detail)
            role.role, role.leader, role.detail = "candidate", "", detail
            IS_LEADER.labels(topic).set(0)

    def set_detail(self, topic: str, detail: str) -> None:
        role = self.roles[topic]
        if role.role == "candidate" and role.detail != detail:
            role.detail = detail
            log.info("topic %s: %s", topic, detail)

    def confirm(self, topic: str) -> None:
        self.roles[topic].confirmed = True

    def unconfirm(self, topic: str) -> None:
        """The fail-safe: a leader that cannot reach ZooKeeper acknowledges nothing.

        The produces waiting for copies are answered at once with UNAVAILABLE
        naming why (not after acks_timeout_ms, in silence): none of them was
        acknowledged, and a producer's retry, to this broker once it is
        confirmed again or to a new leader, is answered as a duplicate where
        the events are held (producer state travels with the log) and stored
        where they are not, so holding them bought nothing but a silent wait.
        """
        role = self.roles[topic]
        if role.role == "leader" and role.confirmed:
            log.warning("topic %s: leadership unconfirmed (ZooKeeper unreachable); nothing is "
                        "acknowledged until it is", topic)
        role.confirmed = False
        if role.role != "leader":
            return
        for tracker in role.trackers.values():
            for future in tracker.drain():
                if not future.done():
                    future.set_exception(BrokerError(
                        "leadership_unconfirmed", broker=self.relay.address, topic=topic))

    def _count_change(self, role: TopicRole, epoch: int) -> None:
        if role.epoch and epoch != role.epoch:
            role.leader_changes += 1
            LEADER_CHANGES.labels(role.topic).inc()

    def _end_leadership(self, role: TopicRole, detail: str) -> None:
        """Fail the produces that wait for copies: this broker no longer leads."""
        if role.role != "leader":
            return
        log.warning("topic %s: no longer leading (%s)", role.topic, detail)
        role.role, role.confirmed = "candidate", False
        for tracker in role.trackers.values():
            for future in tracker.drain():
                if not future.done():
                    future.set_exception(BrokerError(
                        "leadership_lost", broker=self.relay.address, topic=role.topic,
                        offset=tracker.acked_end() or 0))

    async def _truncated(self, topic: str, partition: int, end: int) -> None:
        """A truncation to `end`: the compacted view and subscriptions past it go
        back first (before readers wake)."""
        await self._roll_back_view(topic, partition, end)
        if self.carrier is None:
            return
        for info in self.carrier.list_all(topic):
            for p in info.partitions:
                if p.partition == partition and (p.mark_delete > end or p.read_offset > end):
                    await self.carrier.seek(topic, info.subscription,
                                            pb.StartPosition(offset=min(p.mark_delete, end)),
                                            [partition])

    async def _roll_back_view(self, topic: str, partition: int, end: int) -> None:
        """A compacted view (broker/view) that folded events past the cut is rebuilt
        from the log. It folds only below the high watermark, which no truncation
        cuts, so this is a safety net (e.g. a log written before high watermarks)."""
        try:
            view = self.registry.views.of(topic, partition)
        except BrokerError:
            return
        if view.state.offset_next > end:
            log.warning("topic %s/%d: the compacted view folded offsets up to %d, past the "
                        "truncation to %d; rebuilding it from the log", topic, partition,
                        view.state.offset_next, end)
            await view.rebuild()

    # ------------------------------------------------------------ election helpers

    def log_ends(self, topic: str) -> tuple[int, ...]:
        return tuple(p.log_end for p in self.registry.partitions(topic))

    async def last_epochs(self, topic: str) -> tuple[int, ...]:
        return tuple([await asyncio.to_thread(replica_log.last_epoch, p.store, p.meta.topic_id,
                                              p.index, p.log_end)
                      for p in self.registry.partitions(topic)])

    async def truncate(self, topic: str, partition: int, offset: int) -> None:
        target = self.registry.partition(topic, partition)
        dropped = await target.run_on_task(lambda p: replica_log.truncate(
            p, offset, functools.partial(self._truncated, topic, partition)))
        if dropped is not None:
            log.warning("topic %s/%d: dropped offsets %d..%d (%d events, scn %d..%d) that no "
                        "elected leader had; they were never acknowledged", topic, partition,
                        dropped.offset, dropped.end_before - 1, dropped.events,
                        dropped.scn_first, dropped.scn_last)

    async def catch_up(self, topic: str, sources: Mapping[int, tuple[str, int]],
                       timeout_s: float) -> None:
        """Copy from other candidates up to their ends before leading (election rule 5).

        Raises:
            TimeoutError: not done within timeout_s (the copy stays).
        """
        by_source: dict[str, dict[int, int]] = {}
        for index, (address, end) in sources.items():
            by_source.setdefault(address, {})[index] = end
        followers = [TopicFollower(topic, address, 0, self.registry, self.relay, None,
                                   self._truncated, stop_offsets=stops)
                     for address, stops in by_source.items()]
        for follower in followers:
            follower.start()
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*(f.wait_done() for f in followers))
        finally:
            for follower in followers:
                await follower.stop()

    def followers_cover(self, topic: str, ends: tuple[int, ...]) -> bool:
        """Some follower reported holding `ends` on every partition."""
        role = self.roles[topic]
        brokers = {broker for broker, _ in role.reports}
        return any(all(role.reports.get((broker, i), ("", -1, 0))[1] >= end
                       for i, end in enumerate(ends)) for broker in brokers)

