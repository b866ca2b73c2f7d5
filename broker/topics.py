"""The topic registry: which topics exist and the partitions that serve them.

Admin calls (create, delete, describe) and lookups by the servicers go
through here. Topic metadata is written synchronously before a create or
delete returns. Runs on the event loop; blocking store calls are short.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import asdict

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.partition import Partition, TopicMeta, now_ms
from broker.view.config import check_view_config, describe_view_config
from broker.view.service import ViewService
from sdk.core.hashing import SlotCache
from sdk.core.names import is_name
from sdk.core.pb import keybus_pb2 as pb


class TopicRegistry:
    """Topics by name, each with its running partitions."""

    def __init__(self, store: RocksStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._topics: dict[str, tuple[TopicMeta, list[Partition]]] = {}
        self._lock = asyncio.Lock()  # serializes create/delete against each other
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
        await self.views.close()
        for _, partitions in list(self._topics.values()):
            for partition in partitions:
                await partition.stop()
        self._topics.clear()

    # ------------------------------------------------------------ lookups

    def meta(self, topic: str) -> TopicMeta:
        try:
            return self._topics[topic][0]
        except KeyError:
            raise BrokerError("topic_not_found", topic=topic) from None

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

    async def create(self, topic: str, config: pb.TopicConfig) -> pb.TopicInfo:
        draft = self._check_config(topic, config)
        async with self._lock:
            if topic in self._topics:
                raise BrokerError("topic_exists", topic=topic)
            topic_id = self.store.next_id("next_topic_id")
            meta = dataclasses.replace(draft, topic_id=topic_id)
            self.store.save_topic(asdict(meta))
            self._start(meta)
        return self.describe(topic)

    async def delete(self, topic: str) -> None:
        """Stop the topic's views and partitions, let every listener end its use of
        the topic (subscriptions, processor stores) and wait for the store writes
        they had in flight, then delete every key of the topic in one batch: a
        write landing after that batch would outlive the topic under its id."""
        async with self._lock:
            if topic not in self._topics:
                raise BrokerError("topic_not_found_to_delete", topic=topic)
            meta = self.meta(topic)
            _, partitions = self._topics.pop(topic)
            await self.views.stop(topic)
            for partition in partitions:
                await partition.stop(deleted=True)
            for listener in self.delete_listeners:  # before the delete: their writes settle
                await listener(topic)
            await asyncio.to_thread(self.store.delete_topic, meta.name, meta.topic_id,
                                    meta.partitions)

    def describe(self, topic: str) -> pb.TopicInfo:
        meta = self.meta(topic)
        config = pb.TopicConfig(partitions=meta.partitions, retention_ms=meta.retention_ms,
                                retention_bytes=meta.retention_bytes)
        describe_view_config(meta, config, self.settings)
        info = pb.TopicInfo(topic=meta.name, config=config, created_ms=meta.created_ms,
                            partitions=[p.info() for p in self.partitions(topic)])
        self.views.fill(topic, list(info.partitions))
        return info

    async def enforce_retention(self) -> int:
        """One retention pass over every partition that has a limit."""
        removed = 0
        for _, partitions in list(self._topics.values()):
            for partition in partitions:
                removed += await partition.enforce_retention(now_ms())
        return removed


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
