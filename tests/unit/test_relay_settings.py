"""Relay settings and backoff: what a broker's config may say, and the retry pacing.

Method: worked examples: every accepted form of a `[replication.TOPIC]`
table, each refusal with its message, a TOML file through `load_settings`,
and the follower's backoff doubling up to its one-minute cap.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import ConfigError, Settings, load_settings
from broker.relay.backoff import Backoff
from broker.relay.settings import ReplicationError, TopicReplication, relay_settings


def settings(**replication: dict[str, str]) -> Settings:
    return Settings(host="127.0.0.1", port=6650, zookeeper="127.0.0.1:2181",
                    replication=dict(replication))


def test_forms_of_a_topic_entry() -> None:
    relay = relay_settings(settings(
        a={"upstream": "127.0.0.1:6651"}, b={"leader": "127.0.0.1:6650", "acks": "1"},
        c={"leader": "localhost"}, d={"election": "zookeeper", "acks": "2"},
        e={"acks": "leader"}))
    assert relay.for_topic("a") == TopicReplication("static", "127.0.0.1:6651", 0)
    assert relay.for_topic("b") == TopicReplication("static", "", 1)  # this broker leads
    assert relay.for_topic("c") == TopicReplication("static", "localhost:6650", 0)
    assert relay.for_topic("d") == TopicReplication("zookeeper", "", 2)
    assert relay.for_topic("e") == TopicReplication("none", "", 0)
    assert relay.for_topic("other") is None and relay.broker_id == "127.0.0.1:6650"


def test_star_is_the_default_for_unnamed_topics() -> None:
    relay = relay_settings(settings(**{"*": {"election": "zookeeper"}, "x": {"acks": "1"}}))
    assert relay.for_topic("y") == TopicReplication("zookeeper", "", 0)
    assert relay.for_topic("x") == TopicReplication("none", "", 1)


@pytest.mark.parametrize(("entry", "message"), [
    ({"upstream": "a:1", "leader": "b:1"}, "give at most one of"),
    ({"acks": "two"}, "acks='two' is invalid"),
    ({"acks": "101"}, "0..100"),
    ({"election": "raft"}, "election='raft' is invalid"),
    ({"upstream": "127.0.0.1:6650"}, "cannot chain from itself"),
    ({"upstream": "a:99999"}, "port"),
    ({"priority": "1"}, "unknown key 'priority'"),
])
def test_bad_entries_are_refused_by_name(entry: dict[str, str], message: str) -> None:
    with pytest.raises(ReplicationError, match=message):
        relay_settings(settings(t=entry))


def test_election_needs_a_zookeeper() -> None:
    with pytest.raises(ReplicationError, match="zookeeper setting is empty"):
        relay_settings(Settings(replication={"t": {"election": "zookeeper"}}))


def test_toml_file_and_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('zookeeper = "127.0.0.1:2181"\n[replication.orders]\nelection = "zookeeper"\n'
                    'acks = 2\n')
    loaded = load_settings(str(path), env={})
    assert loaded.replication == {"orders": {"election": "zookeeper", "acks": "2"}}
    path.write_text('[replication.orders]\nacks = "many"\n')
    with pytest.raises(ConfigError, match=r"broker.toml: replication.orders.acks='many'"):
        load_settings(str(path), env={})
    path.write_text('replication = 3\n')
    with pytest.raises(ConfigError):
        load_settings(str(path), env={})


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    backoff = Backoff(100, 60_000)
    delays = [backoff.next_ms() for _ in range(12)]
    assert delays[:4] == [100, 200, 400, 800] and delays[-1] == 60_000
    assert max(delays) == 60_000 and delays == sorted(delays)
    backoff.reset()
    assert backoff.next_ms() == 100


def test_default_backoff_cap_is_one_minute() -> None:
    relay = relay_settings(Settings())
    assert relay.backoff_max_ms == 60_000


def test_port_zero_is_checked_before_it_is_bound() -> None:
    loaded = load_settings(None, env={}, overrides={"port": 0})
    assert loaded.port == 0
    assert relay_settings(loaded, 41234).address == "127.0.0.1:41234"
