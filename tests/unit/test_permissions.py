"""The permission model (broker/security/permissions.py) and the ACL key layout.

Goal: patterns cover what they say and nothing else; superusers hold every
right; an RPC without a rule is for superusers only; a denial names the
principal, the topic and the permission; grants round-trip through their
RocksDB key. Method: the pure table and decide() with hypothesis for the
pattern rule, and example cases for the RPC rules.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.security.acl_store import grant_key, grant_of_key, load_acl_file
from broker.security.permissions import (
    RULES,
    AccessTable,
    Grant,
    GrantError,
    Permission,
    check_grant,
    decide,
    pattern_covers,
    rule_for,
)
from sdk.core.pb import keybus_pb2 as pb

NAMES = st.text(alphabet="abc.-_", min_size=1, max_size=8)


@given(NAMES, NAMES)
def test_prefix_pattern_covers_exactly_the_names_starting_with_it(prefix: str, topic: str) -> None:
    assert pattern_covers(prefix + "*", topic) == topic.startswith(prefix)
    assert pattern_covers(prefix, topic) == (prefix == topic)
    assert pattern_covers("*", topic)


def test_orders_star_covers_orders_dot_anything_not_orders() -> None:
    assert pattern_covers("orders.*", "orders.eu")
    assert not pattern_covers("orders.*", "orders")
    assert not pattern_covers("orders.*", "ordersx")


@pytest.mark.parametrize("pattern", ["", "a b", "or*ders", "**", "x" * 300])
def test_bad_patterns_refused(pattern: str) -> None:
    with pytest.raises(GrantError, match="allowed"):
        check_grant(Grant("alice", pattern, Permission.PRODUCE))


def test_table_decides_per_permission_and_superuser() -> None:
    table = AccessTable(frozenset({"root"}))
    table.add(Grant("alice", "orders.*", Permission.PRODUCE))
    assert table.allows("alice", "orders.eu", Permission.PRODUCE)
    assert not table.allows("alice", "orders.eu", Permission.CONSUME)
    assert not table.allows("bob", "orders.eu", Permission.PRODUCE)
    assert table.allows("root", "anything", Permission.ADMIN)
    table.remove(Grant("alice", "orders.*", Permission.PRODUCE))  # the cache forgets
    assert not table.allows("alice", "orders.eu", Permission.PRODUCE)


def test_every_contract_rpc_has_a_rule_and_unknown_rpcs_are_superuser_only() -> None:
    methods = set(pb.DESCRIPTOR.services_by_name["Keybus"].methods_by_name)
    assert methods <= set(RULES)
    table = AccessTable(frozenset({"root"}))
    table.add(Grant("alice", "*", Permission.ADMIN))
    assert rule_for("SomeFutureRpc").superuser
    denial = decide(table, "alice", rule_for("SomeFutureRpc"), object())
    assert denial is not None and denial.needed == "superuser"
    assert decide(table, "root", rule_for("SomeFutureRpc"), object()) is None


def test_denial_names_principal_topic_and_permission() -> None:
    table = AccessTable()
    request = pb.ReadRequest(topic="orders.eu")
    denial = decide(table, "bob", rule_for("Read"), request)
    assert denial is not None
    message = denial.message("Read")
    assert "'bob'" in message and "consume" in message and "'orders.eu'" in message


def test_subscribe_is_checked_on_open_only_and_describe_by_any_right() -> None:
    table = AccessTable()
    table.add(Grant("alice", "t", Permission.PRODUCE))
    opened = pb.SubscribeRequest(open=pb.SubscribeOpen(topic="t"))
    assert decide(table, "alice", rule_for("Subscribe"), opened) is not None
    assert decide(table, "alice", rule_for("Subscribe"), pb.SubscribeRequest(
        permits=pb.Permits(count=1))) is None
    assert decide(table, "alice", rule_for("DescribeTopic"), pb.DescribeTopicRequest(topic="t")) is None


@given(st.text(min_size=1, max_size=20).filter(lambda p: "\x00" not in p),
       st.sampled_from(["t", "orders.*", "*"]), st.sampled_from(list(Permission)))
def test_grant_key_round_trip(principal: str, topic: str, permission: Permission) -> None:
    grant = Grant(principal, topic, permission)
    assert grant_of_key(grant_key(grant)) == grant


def test_acl_file_names_the_bad_entry(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "acl.toml"  # type: ignore[operator]
    path.write_text('[[grant]]\nprincipal = "a"\ntopic = "orders.*"\npermissions = ["produce", "consume"]\n'
                    '[[grant]]\nprincipal = "b"\ntopic = "t"\npermissions = ["fly"]\n')
    with pytest.raises(GrantError, match="'fly' is unknown"):
        load_acl_file(str(path))
    path.write_text('[[grant]]\nprincipal = "a"\ntopic = "orders.*"\npermissions = ["produce"]\n')
    assert load_acl_file(str(path)) == [Grant("a", "orders.*", Permission.PRODUCE)]


def test_a_dead_letter_topic_needs_produce_on_it() -> None:
    table = AccessTable()
    table.add(Grant("alice", "orders", Permission.CONSUME))
    opened = pb.SubscribeRequest(open=pb.SubscribeOpen(topic="orders", dead_letter_topic="billing"))
    denial = decide(table, "alice", rule_for("Subscribe"), opened)
    assert denial is not None and (denial.topic, denial.needed) == ("billing", "produce")
    table.add(Grant("alice", "billing", Permission.PRODUCE))
    assert decide(table, "alice", rule_for("Subscribe"), opened) is None


def test_a_replica_read_needs_admin_besides_consume() -> None:
    table = AccessTable()
    table.add(Grant("relay", "orders", Permission.CONSUME))
    plain = pb.ReadRequest(topic="orders")
    replica = pb.ReadRequest(topic="orders", replica=True)
    assert decide(table, "relay", rule_for("Read"), plain) is None
    denial = decide(table, "relay", rule_for("Read"), replica)
    assert denial is not None and (denial.topic, denial.needed) == ("orders", "admin")
    table.add(Grant("relay", "orders", Permission.ADMIN))
    assert decide(table, "relay", rule_for("Read"), replica) is None


def test_denial_says_how_the_missing_right_is_had() -> None:
    # A superuser-only call used to say "lacks the superuser permission ...; a superuser
    # grants it (keybus acl grant)": no grant makes a superuser. A call without a topic
    # (keybus cluster status: DescribeCluster of every topic) named no topic at all.
    table = AccessTable(frozenset({"root"}))
    table.add(Grant("alice", "orders.*", Permission.CONSUME))
    grant = decide(table, "alice", rule_for("GrantPermissions"), pb.GrantPermissionsRequest())
    assert grant is not None
    message = grant.message("GrantPermissions")
    assert message.startswith("principal 'alice' is not a superuser, and GrantPermissions is "
                              "for superusers only")
    assert "auth_superusers" in message and "keybus acl grant" not in message
    everything = decide(table, "alice", rule_for("DescribeCluster"), pb.DescribeClusterRequest())
    assert everything is not None
    assert everything.message("DescribeCluster") == (
        "principal 'alice' lacks the produce or consume or admin permission on every topic, "
        "needed for DescribeCluster without a topic; name a topic, or a superuser grants it on "
        "'*' (keybus acl grant)")
