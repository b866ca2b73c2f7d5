"""Subscription restrictions (broker/security/restrictions.py) and their rules.

Goal: a subscription (or event processor group) name is closed to principals
not listed once a restriction covers it, and only then (nothing changes for a
broker without restrictions); a listed principal still needs the topic's
grant; superusers pass; patterns work as a grant's; removing the last
restriction opens the name again; every RPC that acts on a subscription or a
processor group is checked, and its denial says what was refused and how to
get the right; restrictions round-trip through their RocksDB key and the ACL
file. Method: the pure table and decide() with example cases, hypothesis
against a brute-force statement of the rule, and a dict standing in for the
`acls` column family.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import BrokerError
from broker.rpc.acl_servicer import restrictions_of
from broker.security.acl_store import (
    AclStore,
    grant_key,
    grant_of_key,
    load_acl_file,
    load_acl_restrictions,
    restriction_key,
    restriction_of_key,
)
from broker.security.permissions import AccessTable, Grant, GrantError, Permission, decide, rule_for
from broker.security.restrictions import Restriction, SubscriptionRestrictions, check_restriction
from sdk.core.pb import keybus_pb2 as pb


def _table() -> AccessTable:
    table = AccessTable(frozenset({"root"}))
    for who in ("alice", "bob"):
        table.add(Grant(who, "orders", Permission.CONSUME))
        table.add(Grant(who, "orders", Permission.ADMIN))
    return table


def _open(subscription: str, topic: str = "orders") -> pb.SubscribeRequest:
    return pb.SubscribeRequest(open=pb.SubscribeOpen(topic=topic, subscription=subscription))


def test_without_restrictions_every_name_is_open() -> None:
    restrictions = SubscriptionRestrictions()
    assert restrictions.allows("bob", "orders", "billing")
    assert decide(_table(), "bob", rule_for("Subscribe"), _open("billing")) is None


def test_a_restricted_name_admits_only_its_principals_and_superusers() -> None:
    table = _table()
    table.restrictions.add(Restriction("orders", "billing", "alice"))
    assert table.may_use("alice", "orders", "billing")
    assert not table.may_use("bob", "orders", "billing")
    assert table.may_use("root", "orders", "billing")
    assert table.may_use("bob", "orders", "shipping")  # another name: open
    assert table.may_use("bob", "orders.eu", "billing")  # another topic: open
    assert decide(table, "alice", rule_for("Subscribe"), _open("billing")) is None
    assert decide(table, "bob", rule_for("Subscribe"), _open("billing")) is not None
    assert decide(table, "root", rule_for("Subscribe"), _open("billing")) is None


def test_a_restriction_adds_no_right() -> None:
    table = AccessTable()
    table.restrictions.add(Restriction("orders", "billing", "carol"))
    denial = decide(table, "carol", rule_for("Subscribe"), _open("billing"))
    assert denial is not None and denial.needed == "consume" and not denial.subscription


def test_patterns_and_the_union_of_covering_restrictions() -> None:
    restrictions = SubscriptionRestrictions()
    restrictions.add(Restriction("orders.*", "team-a.*", "alice"))
    restrictions.add(Restriction("orders.eu", "team-a.special", "bob"))
    assert restrictions.allows("alice", "orders.eu", "team-a.special")
    assert restrictions.allows("bob", "orders.eu", "team-a.special")
    assert not restrictions.allows("bob", "orders.eu", "team-a.other")
    assert not restrictions.allows("bob", "orders.us", "team-a.special")
    assert restrictions.allows("bob", "orders", "team-a.x")  # orders.* does not cover orders


def test_removing_the_last_restriction_opens_the_name_again() -> None:
    restrictions = SubscriptionRestrictions()
    alice, bob = Restriction("orders", "billing", "alice"), Restriction("orders", "billing", "bob")
    restrictions.add(alice)
    restrictions.add(bob)
    assert not restrictions.allows("carol", "orders", "billing")  # decided, and cached
    restrictions.remove(bob)
    assert not restrictions.allows("bob", "orders", "billing")  # the cache forgot
    assert restrictions.still_restricted("orders", "billing")
    restrictions.remove(alice)
    assert not restrictions.still_restricted("orders", "billing")
    assert restrictions.allows("carol", "orders", "billing")


PARTS = st.sampled_from(["a", "ab", "b"])
PATTERNS = st.sampled_from(["a", "ab", "a*", "*", "b"])


@given(st.lists(st.tuples(PATTERNS, PATTERNS, st.sampled_from(["p", "q"])), max_size=5),
       PARTS, PARTS, st.sampled_from(["p", "q", "r"]))
def test_allows_is_the_rule(entries: list[tuple[str, str, str]], topic: str, name: str,
                            principal: str) -> None:
    restrictions = SubscriptionRestrictions()
    for entry in entries:
        restrictions.add(Restriction(*entry))

    def covers(pattern: str, value: str) -> bool:
        return value.startswith(pattern[:-1]) if pattern.endswith("*") else pattern == value
    covering = [p for t, s, p in entries if covers(t, topic) and covers(s, name)]
    assert restrictions.allows(principal, topic, name) == (not covering or principal in covering)


@pytest.mark.parametrize("rpc, request_", [
    ("Subscribe", _open("billing")),
    ("DescribeSubscription", pb.DescribeSubscriptionRequest(topic="orders", subscription="billing")),
    ("SeekSubscription", pb.SeekSubscriptionRequest(topic="orders", subscription="billing")),
    ("DeleteSubscription", pb.DeleteSubscriptionRequest(topic="orders", subscription="billing")),
    ("ListOwnership", pb.ListOwnershipRequest(topic="orders", consumer_group="billing")),
    ("ClaimOwnership", pb.ClaimOwnershipRequest(topic="orders", consumer_group="billing")),
    ("ListCheckpoints", pb.ListCheckpointsRequest(topic="orders", consumer_group="billing")),
    ("UpdateCheckpoint", pb.UpdateCheckpointRequest(checkpoint=pb.CheckpointRecord(
        namespace="ns", topic="orders", consumer_group="billing"))),
    ("FenceCheckpoints", pb.FenceCheckpointsRequest(namespace="x", topic="orders",
                                                    consumer_group="billing")),
])
def test_every_rpc_on_a_subscription_or_group_is_checked(rpc: str, request_: object) -> None:
    table = _table()
    assert decide(table, "bob", rule_for(rpc), request_) is None  # open before
    table.restrictions.add(Restriction("orders", "billing", "alice"))
    assert decide(table, "alice", rule_for(rpc), request_) is None
    denial = decide(table, "bob", rule_for(rpc), request_)
    assert denial is not None and (denial.topic, denial.subscription) == ("orders", "billing")
    noun = "subscription" if "Subscri" in rpc else "event processor group"
    assert denial.message(rpc) == (
        f"principal 'bob' may not use {noun} 'billing' on topic 'orders', needed for {rpc}: a "
        "superuser restricted it to other principals; use a "
        f"{'subscription' if noun == 'subscription' else 'group'} name of your own, or a "
        "superuser adds you (keybus acl restrict orders billing bob)")


def test_acks_on_the_stream_are_not_checked_apart_from_its_open() -> None:
    table = _table()
    table.restrictions.add(Restriction("orders", "billing", "alice"))
    ack = pb.SubscribeRequest(ack=pb.Ack(partition=0))
    assert decide(table, "bob", rule_for("Subscribe"), ack) is None  # the open decides


def test_restricting_is_for_superusers() -> None:
    table = _table()
    for rpc in ("RestrictSubscription", "UnrestrictSubscription"):
        denial = decide(table, "alice", rule_for(rpc), pb.RestrictSubscriptionRequest())
        assert denial is not None and denial.needed == "superuser"


@pytest.mark.parametrize("restriction, wrong", [
    (Restriction("orders", "bil ling", "a"), "subscription pattern"),
    (Restriction("orders", "", "a"), "subscription pattern"),
    (Restriction("orders", "a*b", "a"), "subscription pattern"),
    (Restriction("or ders", "b", "a"), "topic pattern"),
    (Restriction("orders", "b", ""), "principal"),
    (Restriction("orders", "b", "a\x00b"), "NUL"),
])
def test_bad_restrictions_refused(restriction: Restriction, wrong: str) -> None:
    with pytest.raises(GrantError, match=wrong):
        check_restriction(restriction)


class FakeAcls:
    """The `acls` column family: a key set."""

    def __init__(self) -> None:
        self.keys: set[bytes] = set()

    def load_acl_keys(self) -> list[bytes]:
        return sorted(self.keys)

    def write_acl_keys(self, put: list[bytes], delete: list[bytes]) -> None:
        self.keys |= set(put)
        self.keys -= set(delete)


def test_keys_round_trip_and_a_reopened_store_keeps_grants_and_restrictions_apart() -> None:
    restriction = Restriction("orders.*", "team-a.*", "svc:a/b")
    assert restriction_of_key(restriction_key(restriction)) == restriction
    grant = Grant("alice", "orders", Permission.CONSUME)
    assert grant_of_key(grant_key(grant)) == grant
    disk = FakeAcls()
    store = AclStore(disk, _table())  # type: ignore[arg-type]
    store.grant([grant])
    assert store.restrict([restriction, Restriction("orders", "billing", "alice")]) == 2
    reopened = AclStore(disk, AccessTable())  # type: ignore[arg-type]
    reopened.open()
    assert reopened.table.grants() == [grant]
    assert reopened.table.restrictions.listed() == sorted(
        [restriction, Restriction("orders", "billing", "alice")])
    assert reopened.unrestrict([Restriction("orders", "billing", "")]) == (
        1, [("orders", "billing")])
    assert reopened.unrestrict([Restriction("orders", "billing", "")]) == (0, [])


def test_acl_file_restrictions(tmp_path: Path) -> None:
    path = tmp_path / "acl.toml"
    path.write_text('[[grant]]\nprincipal = "a"\ntopic = "orders"\npermissions = ["consume"]\n'
                    '[[restriction]]\ntopic = "orders"\nsubscription = "billing"\n'
                    'principals = ["a", "b"]\n')
    assert load_acl_file(str(path)) == [Grant("a", "orders", Permission.CONSUME)]
    assert load_acl_restrictions(str(path)) == [Restriction("orders", "billing", "a"),
                                                Restriction("orders", "billing", "b")]
    path.write_text('[[restriction]]\ntopic = "orders"\nsubscription = "bad name"\n'
                    'principals = ["a"]\n')
    with pytest.raises(GrantError, match="restriction 0: subscription pattern 'bad name'"):
        load_acl_restrictions(str(path))
    path.write_text('[[restriction]]\ntopic = "orders"\n')
    with pytest.raises(GrantError, match="needs topic, subscription and principals"):
        load_acl_restrictions(str(path))


def test_a_request_names_every_part_a_restriction_needs() -> None:
    entry = pb.SubscriptionRestriction(topic="orders", subscription="billing")
    with pytest.raises(BrokerError, match=r"entries\[0\].principal is empty"):
        restrictions_of([entry])
    assert restrictions_of([entry], unrestrict=True) == [Restriction("orders", "billing", "")]
    with pytest.raises(BrokerError, match="entries is empty"):
        restrictions_of([], unrestrict=True)
    bad = pb.SubscriptionRestriction(topic="orders", subscription="a b")
    with pytest.raises(BrokerError, match=r"entries\[0\]: subscription pattern 'a b' is invalid"):
        restrictions_of([bad], unrestrict=True)
