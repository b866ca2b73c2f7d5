"""The broker's state beside the log in RocksDB: subscriptions, grants, processor stores.

Job: the small column families other modules own the meaning of: `cursors`
(subscription settings and their cursors, `broker/subscription/`), `acls`
(access grants, `broker/security/acl_store.py`) and `ownership` and
`checkpoints` (the processor stores). Each call is one read or one
WriteBatch, so each stays all or nothing. Kept apart from `rocks_store.py`,
whose job is the database itself and the log (append, read, trim, fsync),
so each file keeps one job.

It is a base class of `RocksStore`, which provides the handles and the write
it declares; a caller always uses a `RocksStore`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import rocksdict

from broker.log import codec


class StateFamilies:
    """See the module docstring; `RocksStore` provides what it declares."""

    durable: bool
    _cf: dict[str, Any]
    _views: dict[str, rocksdict.Rdict]

    def _batch(self) -> rocksdict.WriteBatch:
        raise NotImplementedError

    def write(self, batch: rocksdict.WriteBatch, sync: bool) -> None:
        raise NotImplementedError

    def ended(self, it: Any, what: Callable[[], str]) -> None:
        raise NotImplementedError

    def _name(self, topic_id: int, partition: int | None = None) -> str:
        raise NotImplementedError

    def load_subscriptions(self, topic_id: int) -> list[dict[str, Any]]:
        """Every subscription of a topic, as saved by `save_subscription`."""
        prefix = codec.U32.pack(topic_id) + b"s"
        it = self._views["cursors"].iter()
        it.seek(prefix)
        found = []
        while it.valid() and it.key().startswith(prefix):
            found.append(json.loads(it.value()))
            it.next()
        self.ended(it, lambda: f"the subscriptions of {self._name(topic_id)}")
        return found

    def save_subscription(self, topic_id: int, name: str, config: dict[str, Any],
                          cursors: dict[int, bytes]) -> None:
        """Write a new subscription's settings and initial cursors (partition ->
        bytes) in one synced WriteBatch: it exists on disk before it is used."""
        batch = self._batch()
        family = self._cf["cursors"]
        batch.put(codec.subscription_key(topic_id, name), json.dumps(config).encode(), family)
        for partition, data in cursors.items():
            batch.put(codec.cursor_key(topic_id, partition, name), data, family)
        self.write(batch, sync=True)

    def get_cursor(self, topic_id: int, partition: int, name: str) -> bytes | None:
        value = self._views["cursors"].get(codec.cursor_key(topic_id, partition, name))
        return bytes(value) if value is not None else None

    def put_cursors(self, topic_id: int, name: str, cursors: dict[int, bytes]) -> None:
        """Write cursors (partition -> bytes) in one WriteBatch. Not fsynced even
        when the log is: a lost cursor write only redelivers acked events after
        a machine crash, and a process crash loses nothing (the WAL is written)."""
        batch = self._batch()
        for partition, data in cursors.items():
            batch.put(codec.cursor_key(topic_id, partition, name), data, self._cf["cursors"])
        self.write(batch, sync=False)

    def delete_subscription(self, topic_id: int, name: str, partitions: int) -> None:
        """Remove a subscription's settings and every cursor of it, atomically."""
        batch = self._batch()
        family = self._cf["cursors"]
        batch.delete(codec.subscription_key(topic_id, name), family)
        for partition in range(partitions):
            batch.delete(codec.cursor_key(topic_id, partition, name), family)
        self.write(batch, sync=True)

    # ------------------------------------------------------------ access control

    def load_acl_keys(self) -> list[bytes]:
        """Every key of the `acls` family (a grant is its key; see broker/security/acl_store.py)."""
        it = self._views["acls"].iter()
        it.seek_to_first()
        keys = []
        while it.valid():
            keys.append(bytes(it.key()))
            it.next()
        self.ended(it, lambda: "the access grants")
        return keys

    def write_acl_keys(self, put: list[bytes], delete: list[bytes]) -> None:
        """Add and remove grant keys in one synced WriteBatch."""
        batch = self._batch()
        family = self._cf["acls"]
        for key in put:
            batch.put(key, b"", family)
        for key in delete:
            batch.delete(key, family)
        self.write(batch, sync=True)

    # ------------------------------------------------------------ processor stores

    def get_value(self, family: str, key: bytes) -> bytes | None:
        """One value of a column family (`ownership`, `checkpoints`), or None."""
        value = self._views[family].get(key)
        return bytes(value) if value is not None else None

    def scan_prefix(self, family: str, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Every (key, value) of a column family whose key starts with prefix."""
        it = self._views[family].iter()
        it.seek(prefix)
        found = []
        while it.valid() and it.key().startswith(prefix):
            found.append((bytes(it.key()), bytes(it.value())))
            it.next()
        self.ended(it, lambda: f"the {family} store")
        return found

    def put_many(self, puts: list[tuple[str, bytes, bytes]], durable: bool) -> None:
        """Write (family, key, value) triples in one WriteBatch: all or nothing.
        durable: fsynced like produce (when the broker fsyncs at all)."""
        batch = self._batch()
        for family, key, value in puts:
            batch.put(key, value, self._cf[family])
        self.write(batch, sync=durable and self.durable)
