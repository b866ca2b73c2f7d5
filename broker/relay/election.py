"""Leader election through ZooKeeper: the shell around `election_core.plan`.

ZooKeeper layout under `zookeeper_root`:

    /topics/TOPIC              the topic's config (partitions, retention, incarnation), JSON
    /topics/TOPIC/members/ID   persistent: every broker that ever joined the topic
    /topics/TOPIC/live/ID      ephemeral: a running broker; while no leader is
                               known it holds its candidacy (log ends, last epochs)
    /topics/TOPIC/leader       ephemeral, owned by the leader's session: id, address, epoch
    /topics/TOPIC/state        persistent: epoch, last leader, acks, clean_ends, history

One loop per topic, level-triggered: read a snapshot (setting watches),
plan, act, then sleep until a watch, a session change or a periodic
re-check. Fail-safe: when the session is not CONNECTED a leader keeps its
role but acknowledges nothing (`RelayNode.unconfirm`); when the session is
LOST its ephemeral nodes are gone and the next snapshot puts it with the
candidates. A leader that stops cleanly waits (bounded) for a follower to
hold its whole log, then writes `clean_ends` and deletes its leader node in
one transaction, so a follower takes over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from broker.errors import BrokerError
from broker.relay.election_core import (
    Candidate,
    ElectionState,
    Follow,
    Lead,
    LeaderNode,
    Publish,
    Snapshot,
    TakeOver,
    Wait,
    next_state,
    plan,
    resigned_state,
)
from broker.relay.zk import ZK_ERRORS, ZkSession, describe_zk_error, dumps, loads
from sdk.core.pb import keybus_pb2 as pb

if TYPE_CHECKING:
    from broker.relay.node import RelayNode

log = logging.getLogger("keybus.election")
RECHECK_S = 1.0  # a topic's loop looks again at least this often
ERROR_PAUSE_S = 0.2
_STEP_ERRORS: tuple[type[Exception], ...] = (*ZK_ERRORS, BrokerError, OSError, TimeoutError)


def state_of(data: dict[str, Any]) -> ElectionState:
    clean = data.get("clean_ends")
    return ElectionState(int(data.get("epoch", 0)), str(data.get("leader", "")),
                         int(data.get("copies", 0)), tuple(clean) if clean is not None else None,
                         tuple((int(e), tuple(s)) for e, s in data.get("history", [])))


def state_data(state: ElectionState) -> dict[str, Any]:
    return {"epoch": state.epoch, "leader": state.leader, "copies": state.copies,
            "clean_ends": list(state.clean_ends) if state.clean_ends is not None else None,
            "history": [[e, list(s)] for e, s in state.history]}


def read_snapshot(client: KazooClient, base: str, me: str, session_id: int,
                  watch: Callable[[Any], None]) -> tuple[Snapshot, int]:
    """One topic's election state (blocking; sets watches). Returns the state version too."""
    leader = None
    try:
        data, stat = client.get(f"{base}/leader", watch=watch)
        fields = loads(data)
        leader = LeaderNode(str(fields.get("broker_id", "")), str(fields.get("address", "")),
                            int(fields.get("epoch", 0)), stat.ephemeralOwner == session_id)
    except NoNodeError:
        client.exists(f"{base}/leader", watch=watch)
    try:
        data, stat = client.get(f"{base}/state")
        state, version = state_of(loads(data)), stat.version
    except NoNodeError:
        state, version = ElectionState(), -1
    members = frozenset(client.get_children(f"{base}/members"))
    candidates: dict[str, Candidate] = {}
    for child in client.get_children(f"{base}/live", watch=watch):
        with contextlib.suppress(NoNodeError):
            fields = loads(client.get(f"{base}/live/{child}", watch=watch)[0])
            if fields.get("status") == "candidate" and fields.get("epoch") == state.epoch:
                candidates[child] = Candidate(child, str(fields.get("address", "")),
                                              tuple(fields.get("ends", ())),
                                              tuple(fields.get("epochs", ())))
    return Snapshot(me, leader, state, members, candidates, me in candidates), version


class ZkElection:
    """Every elected topic of this broker (see the module docstring)."""

    def __init__(self, node: RelayNode) -> None:
        self.node = node
        self.relay = node.relay
        self.root = self.relay.zookeeper_root
        self.session: ZkSession | None = None
        self._wakes: dict[str, asyncio.Event] = {}
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._topics_wake = asyncio.Event()
        self._topics_task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def session_state(self) -> str:
        return self.session.state if self.session is not None else "NONE"

    async def start(self) -> None:
        self.session = ZkSession(self.relay.zookeeper, self.relay.session_timeout_ms,
                                 self._session_changed)
        self.session.start()
        self._topics_task = asyncio.get_running_loop().create_task(
            self._watch_topics(), name="election-topics")

    async def stop(self) -> None:
        """Hand over what this broker leads, then close the session."""
        self._stopping = True
        if self._topics_task is not None:
            self._topics_task.cancel()
        for task in self._loops.values():
            task.cancel()
        for task in self._loops.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.session is None:
            return
        led = [topic for topic, role in self.node.roles.items()
               if role.role == "leader" and role.replication.election == "zookeeper"]
        # Together, so a stop takes one handover wait and one bounded resign, not one per
        # topic; without ZooKeeper each says that it does not resign, never nothing.
        await asyncio.gather(*(self._resign(topic) for topic in led))
        await self.session.stop()  # bounded too; says when its leader nodes outlive it

    def join(self, topic: str) -> None:
        """Take part in the topic's election (idempotent)."""
        if topic in self._loops:
            return
        self._wakes[topic] = asyncio.Event()
        self._loops[topic] = asyncio.get_running_loop().create_task(
            self._topic_loop(topic), name=f"election {topic}")

    def _session_changed(self, state: str) -> None:
        if self._stopping:
            return
        if state != "CONNECTED":
            for topic in self._loops:
                self.node.unconfirm(topic)
        for wake in self._wakes.values():
            wake.set()
        self._topics_wake.set()

    def _base(self, topic: str) -> str:
        return f"{self.root}/topics/{topic}"

    # ------------------------------------------------------------ the topic loop

    async def _topic_loop(self, topic: str) -> None:
        wake = self._wakes[topic]
        registered: int | None = None
        while True:
            wake.clear()
            session = self.session
            assert session is not None
            session_id = session.session_id
            try:
                if session_id is None:
                    pass  # roles stay (a leader unconfirmed) until the session is back or lost
                elif registered != session_id:
                    await self._register(topic)
                    registered = session_id
                    wake.set()
                else:
                    await self._step(topic, session, session_id, wake)
            except NoNodeError as e:  # a node of ours went (expired, or removed by hand)
                log.warning("topic %s: %s is gone; joining again", topic, e.path or "a node")
                registered = None
                await asyncio.sleep(ERROR_PAUSE_S)
            except _STEP_ERRORS as e:
                log.warning("topic %s: election step failed (%s); retrying", topic,
                            describe_zk_error(e))
                await asyncio.sleep(ERROR_PAUSE_S)
            except Exception:  # a bug must not end the topic's election silently
                log.exception("topic %s: election step failed unexpectedly; retrying", topic)
                await asyncio.sleep(1.0)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RECHECK_S):
                    await wake.wait()

    async def _step(self, topic: str, session: ZkSession, session_id: int,
                    wake: asyncio.Event) -> None:
        watch = session.watcher(wake)
        snapshot, version = await session.call(read_snapshot, session.client, self._base(topic),
                                               self.relay.broker_id, session_id, watch)
        action = plan(snapshot)
        if isinstance(action, Lead):
            await self.node.become_leader(topic, action.epoch)
            await self._set_live(topic, {"status": "leader", "epoch": action.epoch})
        elif isinstance(action, Follow):
            await self.node.become_follower(topic, action.address, action.epoch)
            await self._set_live(topic, {"status": "follower", "epoch": action.epoch,
                                         "leader": action.address})
        elif isinstance(action, Publish):
            await self._publish(topic, snapshot.state.epoch)
            wake.set()
        elif isinstance(action, Wait):
            self.node.set_detail(topic, action.detail)
        elif isinstance(action, TakeOver):
            await self._take_over(topic, action, snapshot, version)
            wake.set()

    async def _register(self, topic: str) -> None:
        """Join the topic under this session: paths, config, membership, live node."""
        session = self.session
        assert session is not None
        client, base = session.client, self._base(topic)
        meta = self.node.registry.meta(topic)
        config = dumps({"partitions": meta.partitions, "retention_ms": meta.retention_ms,
                        "retention_bytes": meta.retention_bytes,
                        "incarnation": meta.incarnation})  # the same topic on every broker
        with contextlib.suppress(NodeExistsError):  # with its config: others create it from that
            await session.call(client.create, base, config, makepath=True)
        if not loads((await session.call(client.get, base))[0]):
            await session.call(client.set, base, config)
        await session.call(client.ensure_path, f"{base}/members")
        await session.call(client.ensure_path, f"{base}/live")
        me = self.relay.broker_id
        with contextlib.suppress(NodeExistsError):
            await session.call(client.create, f"{base}/members/{me}",
                               dumps({"address": self.relay.address}))
        live = f"{base}/live/{me}"
        with contextlib.suppress(NoNodeError):
            stat = (await session.call(client.get, live))[1]
            if stat.ephemeralOwner != session.session_id:  # this broker's previous process
                await session.call(client.delete, live)
        with contextlib.suppress(NodeExistsError):
            await session.call(client.create, live, dumps({"address": self.relay.address,
                                                           "status": "joining"}),
                               ephemeral=True)
        log.info("topic %s: joined the election at %s as %s", topic, base, me)

    async def _set_live(self, topic: str, fields: dict[str, Any]) -> None:
        session = self.session
        assert session is not None
        path = f"{self._base(topic)}/live/{self.relay.broker_id}"
        data = dumps({"address": self.relay.address, **fields})
        current, _ = await session.call(session.client.get, path)
        if current != data:
            await session.call(session.client.set, path, data)

    async def _publish(self, topic: str, epoch: int) -> None:
        """Stop copying, then publish the log ends this broker holds (election rule 2)."""
        await self.node.become_candidate(topic, "electing a leader")
        ends = self.node.log_ends(topic)
        epochs = await self.node.last_epochs(topic)
        await self._set_live(topic, {"status": "candidate", "epoch": epoch, "ends": list(ends),
                                     "epochs": list(epochs)})
        log.info("topic %s: candidate for epoch %d with log ends %s (last epochs %s)", topic,
                 epoch + 1, list(ends), list(epochs))

    async def _take_over(self, topic: str, action: TakeOver, snapshot: Snapshot,
                         version: int) -> None:
        """Drop the invalid tail, catch up, claim the next epoch (election rule 5)."""
        for index, end in action.truncate_to.items():
            await self.node.truncate(topic, index, end)
        if action.catch_up:
            log.info("topic %s: catching up %s before leading", topic, dict(action.catch_up))
            try:
                await self.node.catch_up(topic, action.catch_up, self.relay.acks_timeout_ms / 1000)
            except TimeoutError:
                log.warning("topic %s: catch-up did not finish; standing again", topic)
                await self._publish(topic, snapshot.state.epoch)
                return
        ends = self.node.log_ends(topic)
        role = self.node.roles[topic]
        state = next_state(snapshot.state, self.relay.broker_id, role.replication.acks, ends)
        leader = {"broker_id": self.relay.broker_id, "address": self.relay.address,
                  "epoch": state.epoch}
        if not await self._commit_claim(topic, state, leader, version):
            return
        log.info("topic %s: elected leader for epoch %d with log ends %s (candidates %s)", topic,
                 state.epoch, list(ends), sorted(snapshot.candidates))
        await self.node.become_leader(topic, state.epoch)

    async def _commit_claim(self, topic: str, state: ElectionState, leader: dict[str, Any],
                            version: int) -> bool:
        session = self.session
        assert session is not None
        base = self._base(topic)

        def commit() -> list[Any]:
            transaction = session.client.transaction()
            if version < 0:
                transaction.create(f"{base}/state", dumps(state_data(state)))
            else:
                transaction.set_data(f"{base}/state", dumps(state_data(state)), version=version)
            transaction.create(f"{base}/leader", dumps(leader), ephemeral=True)
            return list(transaction.commit())

        results = await session.call(commit)
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            log.info("topic %s: claim for epoch %d lost (%s); looking again", topic, state.epoch,
                     type(failures[0]).__name__)
            return False
        return True

    async def _resign(self, topic: str) -> None:
        """A clean stop: wait for a follower to hold everything, then hand over.

        Bounded: the wait by `leader_handover_timeout_ms`, the record of the
        resignation by the session timeout. Without ZooKeeper (the session not
        CONNECTED, or no answer in time) it gives up: the leader node goes
        when the session expires, and the election then waits for the quorum
        rule as after a crash. A stop never hangs on ZooKeeper.
        """
        session = self.session
        assert session is not None
        role = self.node.roles[topic]
        role.stopping = True
        ends = self.node.log_ends(topic)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.relay.handover_timeout_ms / 1000
        while not self.node.followers_cover(topic, ends) and loop.time() < deadline \
                and session.state == "CONNECTED":
            await asyncio.sleep(0.02)
        if session.state != "CONNECTED":
            log.warning("topic %s: not resigning: the ZooKeeper session is %s; the leader node "
                        "goes when the session expires", topic, session.state)
            return
        timeout_s = self.relay.session_timeout_ms / 1000
        try:
            async with asyncio.timeout(timeout_s):
                results = await self._record_resignation(topic, ends)
        except TimeoutError:
            log.warning("topic %s: resignation not recorded: ZooKeeper did not answer within "
                        "zookeeper_session_timeout_ms=%d (session %s); the leader node goes when "
                        "the session expires", topic, self.relay.session_timeout_ms, session.state)
            return
        except _STEP_ERRORS as e:
            log.warning("topic %s: resignation not recorded (%s); the leader node goes when "
                        "the session ends", topic, describe_zk_error(e))
            return
        covered = self.node.followers_cover(topic, ends)
        log.info("topic %s: resigned leadership at log ends %s (%s)", topic, list(ends),
                 "a follower holds all of it" if covered else
                 "no follower caught up in time: the election waits for the quorum rule")
        if any(isinstance(r, Exception) for r in results):
            log.warning("topic %s: resignation not recorded (%s)", topic, results)

    async def _record_resignation(self, topic: str, ends: tuple[int, ...]) -> list[Any]:
        """Write `clean_ends` and delete the leader node in one transaction."""
        session = self.session
        assert session is not None
        base = self._base(topic)
        data, stat = await session.call(session.client.get, f"{base}/state")
        state = resigned_state(state_of(loads(data)), ends)

        def commit() -> list[Any]:
            transaction = session.client.transaction()
            transaction.set_data(f"{base}/state", dumps(state_data(state)), version=stat.version)
            transaction.delete(f"{base}/leader")
            return list(transaction.commit())

        return await session.call(commit)

    # ------------------------------------------------------------ topics

    async def _watch_topics(self) -> None:
        """Join the elected topics other brokers created (create them here from ZooKeeper)."""
        while True:
            self._topics_wake.clear()
            session = self.session
            assert session is not None
            if session.state == "CONNECTED":
                try:
                    await self._join_listed(session)
                except _STEP_ERRORS as e:
                    log.warning("listing elected topics failed (%s); retrying", e)
                except Exception:
                    log.exception("listing elected topics failed unexpectedly; retrying")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5 * RECHECK_S):
                    await self._topics_wake.wait()

    async def _join_listed(self, session: ZkSession) -> None:
        await session.call(session.client.ensure_path, f"{self.root}/topics")
        watch = session.watcher(self._topics_wake)
        names = await session.call(session.client.get_children, f"{self.root}/topics", watch=watch)
        registry = self.node.registry
        for name in names:
            replication = self.relay.for_topic(name)
            if replication is None or replication.election != "zookeeper":
                continue
            if name not in registry.names():
                config = loads((await session.call(session.client.get, self._base(name)))[0])
                if not config:
                    continue  # its creator has not written the config yet; the next round
                with contextlib.suppress(BrokerError):
                    await registry.create(name, pb.TopicConfig(
                        partitions=int(config.get("partitions", 1)),
                        retention_ms=int(config.get("retention_ms", 0)),
                        retention_bytes=int(config.get("retention_bytes", 0))),
                        str(config.get("incarnation", "")))
                    log.info("topic %s: created from ZooKeeper (%s)", name, config)
            self.join(name)
