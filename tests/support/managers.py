"""A subscription manager without a broker process, for unit tests of dispatchers.

A real topic registry and subscription manager on a real store, with topic "t"
of one partition; the test drives the manager as the servicers would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from broker.config import Settings
from broker.log.rocks_store import RocksStore
from broker.subscription.manager import SubscriptionManager
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb


@asynccontextmanager
async def subscription_manager(store: RocksStore, settings: Settings
                               ) -> AsyncIterator[tuple[TopicRegistry, SubscriptionManager]]:
    """Open a registry and manager on `store` with topic "t" (1 partition); close them after
    (the store stays open: the caller's)."""
    registry = TopicRegistry(store, settings)
    await registry.open()
    manager = SubscriptionManager(registry, store, settings, {})
    await manager.open()
    try:
        await registry.create("t", pb.TopicConfig(partitions=1))
        yield registry, manager
    finally:
        await manager.close()
        await registry.close()
