"""The grants, kept in the broker's RocksDB (`acls` column family) and in memory.

A grant is its key: `permission u8 | principal utf-8 | 0x00 | topic pattern`
(a principal never holds a NUL byte: it is refused), so grant and revoke are
a put and a delete, and loading is one scan. A subscription restriction
(restrictions.py) is a key of its own in the same family:
`0x80 | principal | 0x00 | topic pattern | 0x00 | subscription pattern`
(0x80 is no permission; patterns hold no NUL). A broker older than
restrictions refuses to start on such a store (its load names 128 as no
permission) rather than open the restricted subscriptions to everyone. Changes are written with a
synced WriteBatch before the in-memory table changes, so a grant the caller
saw succeed survives a crash, and a failed write changes nothing.

An ACL file (TOML, `acl_file` setting) can seed grants at start:

    [[grant]]
    principal = "orders-service"
    topic = "orders.*"
    permissions = ["produce", "consume"]

    [[restriction]]
    topic = "orders"
    subscription = "billing"
    principals = ["billing-service"]
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from typing import Any

from broker.log.rocks_store import RocksStore
from broker.security.permissions import AccessTable, Grant, GrantError, Permission, check_grant
from broker.security.restrictions import Restriction, check_restriction

RESTRICTION_TAG = 0x80


def restriction_key(restriction: Restriction) -> bytes:
    return (bytes([RESTRICTION_TAG]) + restriction.principal.encode() + b"\x00"
            + restriction.topic.encode() + b"\x00" + restriction.subscription.encode())


def restriction_of_key(key: bytes) -> Restriction:
    principal, _, patterns = key[1:].partition(b"\x00")
    topic, _, subscription = patterns.partition(b"\x00")
    return Restriction(topic.decode(), subscription.decode(), principal.decode())


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


def _read_acl_file(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise GrantError(f"acl_file {path}: {e}") from None


def load_acl_restrictions(path: str) -> list[Restriction]:
    """The `[[restriction]]` entries of an ACL file, or GrantError naming the wrong one."""
    entries = _read_acl_file(path).get("restriction", [])
    restrictions = []
    for i, entry in enumerate(entries if isinstance(entries, list) else [entries]):
        try:
            topic, subscription = str(entry["topic"]), str(entry["subscription"])
            names = entry["principals"]
        except (KeyError, TypeError):
            raise GrantError(f"acl_file {path}: restriction {i} needs topic, subscription and "
                             "principals") from None
        for name in names if isinstance(names, list) else [names]:
            try:
                restrictions.append(check_restriction(Restriction(topic, subscription, str(name))))
            except GrantError as e:
                raise GrantError(f"acl_file {path}: restriction {i}: {e}") from None
    return restrictions


def load_acl_file(path: str) -> list[Grant]:
    """The grants of an ACL file, or GrantError naming the entry that is wrong."""
    data = _read_acl_file(path)
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

    def open(self, seed: Iterable[Grant] = (), seed_restrictions: Iterable[Restriction] = ()
             ) -> None:
        """Load every stored grant and restriction, after adding the seed ones (ACL file)."""
        seed = [_checked(g) for g in seed]
        restrictions = [check_restriction(r) for r in seed_restrictions]
        if seed or restrictions:
            self.store.write_acl_keys([grant_key(g) for g in seed]
                                      + [restriction_key(r) for r in restrictions], [])
        keys = self.store.load_acl_keys()
        self.table.replace(grant_of_key(k) for k in keys if k[0] != RESTRICTION_TAG)
        self.table.restrictions.replace(
            restriction_of_key(k) for k in keys if k[0] == RESTRICTION_TAG)

    def grant(self, grants: list[Grant]) -> int:
        """Store grants (synced); returns how many were new. GrantError on a bad one."""
        checked = [_checked(g) for g in grants]
        self.store.write_acl_keys([grant_key(g) for g in checked], [])
        return sum(self.table.add(g) for g in checked)

    def revoke(self, grants: list[Grant]) -> int:
        """Remove grants (synced); returns how many were there."""
        self.store.write_acl_keys([], [grant_key(g) for g in grants])
        return sum(self.table.remove(g) for g in grants)

    def restrict(self, restrictions: list[Restriction]) -> int:
        """Store restrictions (synced); returns how many were new. GrantError on a bad one."""
        checked = [check_restriction(r) for r in restrictions]
        self.store.write_acl_keys([restriction_key(r) for r in checked], [])
        return sum(self.table.restrictions.add(r) for r in checked)

    def unrestrict(self, restrictions: list[Restriction]) -> tuple[int, list[tuple[str, str]]]:
        """Remove restrictions (synced); one with principal "" removes every
        principal's of its two patterns. Returns how many were there, and the
        (topic, subscription) patterns left with none (open again)."""
        table = self.table.restrictions
        found = sorted({stored for r in restrictions
                        for stored in table.matching(r.topic, r.subscription, r.principal)})
        self.store.write_acl_keys([], [restriction_key(r) for r in found])
        removed = sum(table.remove(r) for r in found)
        pairs = sorted({(r.topic, r.subscription) for r in found})
        return removed, [pair for pair in pairs if not table.still_restricted(*pair)]
