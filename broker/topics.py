"""The topic registry: which topics exist and the partitions that serve them.

Admin calls (create, delete, describe) and lookups by the servicers go
through here. Topic metadata is written synchronously before a create or
delete returns. Runs on the event loop; blocking store calls are short.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.partition import Partition, TopicMeta, now_ms
from broker.supervision import describe_cause
from broker.view.config import check_view_config, describe_view_config
from broker.view.service import ViewService
from sdk.core.hashing import SlotCache
from sdk.core.names import is_name
from sdk.core.pb import keybus_pb2 as pb

log = logging.getLogger("keybus.topics")


@dataclasses.dataclass(slots=True)
class TopicDelete:
    """A delete in progress: its task and the step it waits for (what a slow delete
    is reported waiting for)."""

    meta: TopicMeta
    task: asyncio.Task[None] | None = None
    step: str = "the topic's views to stop"
    started_s: float = dataclasses.field(default_factory=time.monotonic)


class TopicRegistry:
    """Topics by name, each with its running partitions."""

    def __init__(self, store: RocksStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._topics: dict[str, tuple[TopicMeta, list[Partition]]] = {}
        self._lock = asyncio.Lock()  # serializes create/delete against each other
        # Deletes in progress by name: the topic has left `_topics`, its keys not the store.
        self._deleting: dict[str, TopicDelete] = {}
        self.slot_cache = SlotCache()  # one for every partition: bounded once (derived.py)
        # Called with a topic's name once it is deleted (e.g. its subscriptions go),
        # before its keys are: each returns once it writes nothing more of the topic.
        self.delete_listeners: list[Callable[[str], Awaitable[None]]] = []
        # Called with a topic's partitions once they run, loaded or created (relay roles).
        self.start_listeners: list[Callable[[TopicMeta, list[Partition]], None]] = []
        self.views = ViewService(store, settings)  # compacted views (broker/view)

    async def open(self) -> None:
        """Load every topic and recover each partition's tail (no log scan)."""
        for raw in self.store.load_topics():
            meta = TopicMeta(**raw)
            if not meta.incarnation:  # stored before brokers set it: one, once
                meta = dataclasses.replace(meta, incarnation=new_incarnation(),
                                           incarnation_backfilled=True)
                self.store.save_topic(asdict(meta))
                log.info("topic %s: stored without an incarnation; it is incarnation %r now "
                         "(a relay follower takes its upstream's)", meta.name, meta.incarnation)
            self._start(meta)

    def _start(self, meta: TopicMeta) -> None:
        partitions = []
        for index in range(meta.partitions):
            tail = self.store.recover_tail(meta.topic_id, index)
            partition = Partition(self.store, meta, index, self.settings, tail, self.slot_cache)
            partition.start()
            partitions.append(partition)
        self._topics[meta.name] = (meta, partitions)
        for listener in self.start_listeners:
            listener(meta, partitions)
        self.views.start(meta, partitions)

    async def close(self) -> None:
        await self._finish_deletes()
        await self.views.close()
        for _, partitions in list(self._topics.values()):
            for partition in partitions:
                await partition.stop()
        self._topics.clear()

    async def _finish_deletes(self) -> None:
        """Let deletes in progress finish before the store closes, within
        `topic_delete_wait_ms`; one still waiting then is cancelled and said so:
        its keys are still in the store, so the topic is back after a restart."""
        tasks = [(d, d.task) for d in self._deleting.values() if d.task is not None]
        if not tasks:
            return
        await asyncio.wait([task for _, task in tasks],
                           timeout=self.settings.topic_delete_wait_ms / 1000)
        for delete, task in tasks:
            if not task.done():
                log.warning("stopping before the delete of topic %s finished (it waits for "
                            "%s): the topic is back after a restart; delete it again then",
                            delete.meta.name, delete.step)
                task.cancel()

    # ------------------------------------------------------------ lookups

    def meta(self, topic: str) -> TopicMeta:
        try:
            return self._topics[topic][0]
        except KeyError:
            # no topic is named "": a field left empty, not a topic to create
            raise BrokerError("topic_name_missing" if not topic else "topic_not_found",
                              topic=topic) from None

    def partition(self, topic: str, index: int) -> Partition:
        meta = self.meta(topic)
        if not 0 <= index < meta.partitions:
            raise BrokerError("partition_out_of_range", partition=index, topic=topic,
                              last=meta.partitions - 1)
        return self._topics[topic][1][index]

    def partitions(self, topic: str) -> list[Partition]:
        self.meta(topic)
        return self._topics[topic][1]

    def names(self) -> list[str]:
        return sorted(self._topics)

    # ------------------------------------------------------------ admin

    def _check_config(self, topic: str, config: pb.TopicConfig) -> TopicMeta:
        limit = self.settings.topic_name_bytes_max
        if not is_name(topic, limit):
            raise BrokerError("topic_name_invalid", topic=topic, max=limit)
        partitions = config.partitions or self.settings.default_partitions
        if not 1 <= partitions <= self.settings.partitions_max:
            raise BrokerError("partitions_invalid", value=partitions,
                              max=self.settings.partitions_max)
        retention_ms, retention_bytes = (
            topic_retention(name, getattr(config, name), getattr(self.settings, name))
            for name in ("retention_ms", "retention_bytes"))
        meta = TopicMeta(topic, 0, partitions, retention_ms, retention_bytes, now_ms())
        return check_view_config(meta, config, self.settings)

    async def create(self, topic: str, config: pb.TopicConfig,
                     incarnation: str = "") -> pb.TopicInfo:
        """Create a topic. `incarnation`: a follower's copy of its upstream's
        (a replica is the same topic); "" makes a new one (new_incarnation)."""
        draft = self._check_config(topic, config)
        async with self._lock:
            if topic in self._topics:
                raise BrokerError("topic_exists", topic=topic)
            deleting = self._deleting.get(topic)
            if deleting is not None:  # its key under the name is not deleted yet
                raise BrokerError("topic_being_deleted", topic=topic, step=deleting.step)
            topic_id = self.store.next_id("next_topic_id")
            meta = dataclasses.replace(draft, topic_id=topic_id,
                                       incarnation=incarnation or new_incarnation())
            self.store.save_topic(asdict(meta))
            self._start(meta)
        return self.describe(topic)

    def set_incarnation(self, topic: str, incarnation: str) -> None:
        """Take `incarnation` as the topic's (a relay follower's copy takes its
        upstream's, broker/relay/incarnation.py), stored before it is used."""
        meta, partitions = self._topics[topic]
        meta = dataclasses.replace(meta, incarnation=incarnation, incarnation_backfilled=False)
        self.store.save_topic(asdict(meta))
        self._topics[topic] = (meta, partitions)
        for partition in partitions:
            partition.meta = meta

    async def delete(self, topic: str) -> None:
        """Take the topic out of the registry and delete it (`_delete`) in a task of
        its own, then wait for that task at most `topic_delete_wait_ms`. Why a task:
        a client that gives up (its deadline, a closed channel) cancels this call,
        and a delete cancelled half way would leave the topic out of the registry
        with its keys in the store. A delete asked for again while one runs waits
        for that one.

        Raises:
            BrokerError: topic_not_found_to_delete; topic_delete_slow (UNAVAILABLE)
                when the delete goes on past the wait, naming the step it waits for;
                what the delete itself raised (a store failure).
        """
        deleting = self._deleting.get(topic)
        if deleting is None:
            async with self._lock:
                deleting = self._deleting.get(topic)
                if deleting is None:
                    deleting = self._begin_delete(topic)
        assert deleting.task is not None
        wait_ms = self.settings.topic_delete_wait_ms
        done, _ = await asyncio.wait([deleting.task], timeout=wait_ms / 1000)
        if not done:
            log.warning("deleting topic %s takes longer than %d ms: it waits for %s; it goes "
                        "on", topic, wait_ms, deleting.step)
            raise BrokerError("topic_delete_slow", topic=topic, waited_ms=wait_ms,
                              step=deleting.step)
        deleting.task.result()

    def _begin_delete(self, topic: str) -> TopicDelete:
        """Under the lock: out of the registry at once (every later call naming the
        topic is refused "does not exist"), the rest in the delete's task."""
        if topic not in self._topics:
            raise BrokerError("topic_not_found_to_delete", topic=topic)
        meta, partitions = self._topics.pop(topic)
        deleting = TopicDelete(meta)
        deleting.task = asyncio.get_running_loop().create_task(
            self._delete(deleting, partitions), name=f"delete topic {topic}")
        self._deleting[topic] = deleting

        def ended(task: asyncio.Task[None]) -> None:
            del self._deleting[topic]
            error = None if task.cancelled() else task.exception()  # a waiter raises it too
            took_ms = (time.monotonic() - deleting.started_s) * 1000
            if took_ms <= self.settings.topic_delete_wait_ms:
                return  # the DeleteTopic got the outcome
            if error is None:
                log.info("deleted topic %s after %d ms", topic, took_ms)
            else:
                log.warning("deleting topic %s failed after %d ms: %s", topic, took_ms,
                            describe_cause(error))
        deleting.task.add_done_callback(ended)
        return deleting

    async def _delete(self, deleting: TopicDelete, partitions: list[Partition]) -> None:
        """Stop the topic's views and partitions, let every listener end its use of
        the topic (subscriptions, processor stores) and wait for the store writes
        they had in flight, then delete every key of the topic in one batch: a
        write landing after that batch would outlive the topic under its id."""
        meta = deleting.meta
        await self.views.stop(meta.name)
        deleting.step = "the topic's partitions to stop"
        for partition in partitions:
            await partition.stop(deleted=True)
        for listener in self.delete_listeners:  # before the delete: their writes settle
            deleting.step = describe_listener(listener)
            await listener(meta.name)
        deleting.step = "the store to delete its keys"
        await asyncio.to_thread(self.store.delete_topic, meta.name, meta.topic_id,
                                meta.partitions)

    def describe(self, topic: str) -> pb.TopicInfo:
        meta = self.meta(topic)
        config = pb.TopicConfig(partitions=meta.partitions, retention_ms=meta.retention_ms,
                                retention_bytes=meta.retention_bytes)
        describe_view_config(meta, config, self.settings)
        info = pb.TopicInfo(topic=meta.name, config=config, created_ms=meta.created_ms,
                            partitions=[p.info() for p in self.partitions(topic)],
                            incarnation=meta.incarnation)
        self.views.fill(topic, list(info.partitions))
        return info

    async def enforce_retention(self) -> int:
        """One retention pass over every partition that has a limit."""
        removed = 0
        for _, partitions in list(self._topics.values()):
            for partition in partitions:
                removed += await partition.enforce_retention(now_ms())
        return removed


def new_incarnation() -> str:
    """A new topic's incarnation: 16 random hex digits (Kafka's topic ID is a
    random UUID). Random, not a counter: a counter restarts with an empty store
    and differs between brokers, and two topics of one name must never share one."""
    return secrets.token_hex(8)


def describe_listener(listener: Callable[[str], Awaitable[None]]) -> str:
    """A delete listener as a slow delete names the step it waits for: "the delete
    listener SubscriptionManager.drop_topic" (its owner's class and its method)."""
    owner = getattr(listener, "__self__", None)
    name = getattr(listener, "__name__", repr(listener))
    return f"the delete listener {type(owner).__name__ + '.' if owner is not None else ''}{name}"


def topic_retention(name: str, asked: int, default: int) -> int:
    """A topic's retention limit as stored (0: none) from what CreateTopic asked:
    0 takes the broker's default, -1 none (a topic kept forever on a broker whose
    default expires events), a positive number itself."""
    if asked < -1:
        none = "keep forever" if name == "retention_ms" else "no size limit"
        raise BrokerError("retention_invalid", field=name, value=asked,
                          allowed=f"-1 ({none}), 0 (the broker's default: "
                                  f"{f'{default:,}' if default else 'none'}) or a positive number")
    return 0 if asked == -1 else asked or default
