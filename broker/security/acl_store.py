"""The grants, kept in the broker's RocksDB (`acls` column family) and in memory.

A grant is its key: `permission u8 | principal utf-8 | 0x00 | topic pattern`
(a principal never holds a NUL byte: it is refused), so grant and revoke are
a put and a delete, and loading is one scan. Changes are written with a
synced WriteBatch before the in-memory table changes, so a grant the caller
saw succeed survives a crash, and a failed write changes nothing.

An ACL file (TOML, `acl_file` setting) can seed grants at start:

    [[grant]]
    principal = "orders-service"
    topic = "orders.*"
    permissions = ["produce", "consume"]
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable

from broker.log.rocks_store import RocksStore
from broker.security.permissions import AccessTable, Grant, GrantError, Permission, check_grant


def grant_key(grant: Grant) -> bytes:
    return bytes([grant.permission]) + grant.principal.encode() + b"\x00" + grant.topic.encode()


def grant_of_key(key: bytes) -> Grant:
    principal, _, topic = key[1:].partition(b"\x00")
    return Grant(principal.decode(), topic.decode(), Permission(key[0]))


def parse_permission(text: str) -> Permission:
    try:
        return Permission[text.strip().upper()]
    except KeyError:
        raise GrantError(f"permission {text!r} is unknown; allowed: produce, consume, admin") from None


def load_acl_file(path: str) -> list[Grant]:
    """The grants of an ACL file, or GrantError naming the entry that is wrong."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise GrantError(f"acl_file {path}: {e}") from None
    grants = []
    for i, entry in enumerate(data.get("grant", [])):
        try:
            principal, topic = str(entry["principal"]), str(entry["topic"])
            names = entry["permissions"]
        except (KeyError, TypeError):
            raise GrantError(f"acl_file {path}: grant {i} needs principal, topic and "
                             "permissions") from None
        for name in names if isinstance(names, list) else [names]:
            grants.append(_checked(Grant(principal, topic, parse_permission(str(name)))))
    return grants


def _checked(grant: Grant) -> Grant:
    if "\x00" in grant.principal:
        raise GrantError("a principal may not contain a NUL character")
    return check_grant(grant)


class AclStore:
    """Grants on disk and in the `AccessTable` that decides calls."""

    def __init__(self, store: RocksStore, table: AccessTable) -> None:
        self.store = store
        self.table = table

    def open(self, seed: Iterable[Grant] = ()) -> None:
        """Load every stored grant, after adding the seed grants (ACL file)."""
        seed = [_checked(g) for g in seed]
        if seed:
            self.store.write_acl_keys([grant_key(g) for g in seed], [])
        self.table.replace(grant_of_key(k) for k in self.store.load_acl_keys())

    def grant(self, grants: list[Grant]) -> int:
        """Store grants (synced); returns how many were new. GrantError on a bad one."""
        checked = [_checked(g) for g in grants]
        self.store.write_acl_keys([grant_key(g) for g in checked], [])
        return sum(self.table.add(g) for g in checked)

    def revoke(self, grants: list[Grant]) -> int:
        """Remove grants (synced); returns how many were there."""
        self.store.write_acl_keys([], [grant_key(g) for g in grants])
        return sum(self.table.remove(g) for g in grants)
