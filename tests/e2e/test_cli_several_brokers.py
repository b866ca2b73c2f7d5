"""The CLI given several brokers (`--broker h1,h2`), as the README tells a cluster user.

Goal: `produce`, `read` (every partition) and `consume` follow the topic's
leader when given every broker's address, whichever comes first; `cluster
status` fits 80 columns without cutting a topic or an address, and says in
one line (exit 1) when no broker answers.
Method: two real broker processes on 127.0.0.1 with static relay settings
(one leads the topic, the other copies it; no ZooKeeper), the `keybus`
command as a subprocess with COLUMNS=80; the follower is listed first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from keybus.dev_cluster import BrokerRunner, free_port
from sdk.core.hashing import slot_of
from tests.e2e.test_cli import keybus, ok, one_line
from tests.support.relay_cluster import events, wait_for

TOPIC = "cli-pair"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    root = Path(tmp_path_factory.mktemp("pair"))
    leader_config, follower_config = root / "leader.toml", root / "follower.toml"
    leader = BrokerRunner(root / "leader", free_port(), leader_config)
    follower = BrokerRunner(root / "follower", free_port(), follower_config)
    leader_config.write_text(f"[replication.{TOPIC}]\nacks = 1\n")
    follower_config.write_text(f'relay_sync_interval_ms = 200\n[replication.{TOPIC}]\n'
                               f'upstream = "{leader.address}"\n')
    try:
        leader.start()
        follower.start()
        ok(keybus(None, "topics", "create", TOPIC, "--partitions", "2", "--broker",
                  leader.address))
        wait_for(lambda: events(follower.address, TOPIC) >= 0, 30, "the follower has the topic")
        yield leader.address, follower.address
    finally:
        follower.stop()
        leader.stop()


def keys_on_both_partitions() -> list[int]:
    """Two keys that hash to partitions 0 and 1 of a two-partition topic."""
    first = {slot_of(k) % 2: k for k in range(100)}
    return [first[0], first[1]]


def test_produce_read_consume_follow_the_leader(pair: tuple[str, str]) -> None:
    leader, follower = pair
    both = f"{follower},{leader}"
    keys = keys_on_both_partitions()
    lines = "".join(json.dumps({"key": k, "value": f"v{k}"}) + "\n" for k in keys)
    produced = ok(keybus(None, "produce", TOPIC, "--broker", both, stdin=lines))
    assert len(produced.splitlines()) == 2, produced
    read = [json.loads(line) for line in
            ok(keybus(None, "read", TOPIC, "--json", "--broker", both)).splitlines()]
    assert sorted((e["partition"], e["key"]) for e in read) == [(0, keys[0]), (1, keys[1])]
    consumed = ok(keybus(None, "consume", TOPIC, "-s", "pair", "--start", "earliest", "--max",
                         "2", "--timeout", "20", "--json", "--broker", both))
    assert sorted(json.loads(line)["key"] for line in consumed.splitlines()) == sorted(keys)


def test_cluster_status_fits_80_columns(pair: tuple[str, str]) -> None:
    leader, follower = pair
    text = ok(keybus(None, "cluster", "status", "--broker", f"{leader},{follower}",
                     "--timeout", "20"))
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines) and "…" not in text, text
    assert any(leader in line and "leader" in line for line in lines), text
    assert any(follower in line and "follower" in line for line in lines), text
    status = json.loads(ok(keybus(None, "cluster", "status", "--json", "--broker",
                                  f"{leader},{follower}", "--timeout", "20")))
    (topic,) = [t for t in status["topics"] if t["topic"] == TOPIC]
    assert topic["leader"] == leader


def test_cluster_status_without_an_answer_is_one_line() -> None:
    closed = f"127.0.0.1:{free_port()}"
    line = one_line(keybus(None, "cluster", "status", "--broker", closed), 1)
    assert line.startswith(f"keybus: error: no broker answered: {closed}: cannot reach broker "
                           f"at {closed}: connection refused"), line
