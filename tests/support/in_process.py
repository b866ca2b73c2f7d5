"""A real broker run in this test's event loop on a store the test chose.

For supervision tests: `start_broker(settings, store)` takes a RocksStore
subclass that injects faults (nothing in the broker knows about it); the
broker is real (gRPC on 127.0.0.1, RocksDB in the temp dir). The restart
backoff is short so a restart happens within a test's bounded waits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

from broker.config import Settings
from broker.log.rocks_store import RocksStore
from broker.server import start_broker
from sdk.admin import Admin

S = TypeVar("S", bound=RocksStore)


@asynccontextmanager
async def broker_on(tmp_path: Path, store_type: type[S], topic: str = "orders",
                    partitions: int = 2) -> AsyncIterator[tuple[str, S]]:
    """Start a broker on a `store_type` store with `topic` created; yield its
    address and the store; stop it on exit."""
    settings = Settings(data_dir=str(tmp_path), port=0, fsync=False,
                        task_restart_backoff_ms=100, task_restart_backoff_max_ms=300)
    store = store_type(str(tmp_path / "log.rocksdb"), fsync=False)
    broker = await start_broker(settings, store)
    address = f"127.0.0.1:{broker.port}"
    try:
        admin = Admin(address)
        await admin.create_topic(topic, partitions=partitions)
        await admin.close()
        yield address, store
    finally:
        await broker.stop()
