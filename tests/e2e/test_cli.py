"""The `keybus` command against a real broker process.

Goal: every command works end to end, prints JSON with --json, and bad input
gets one clear line on stderr and a non-zero exit, never a traceback.
Method: run `python -m keybus ...` as a subprocess (as a user would), with
KEYBUS_BROKER pointing at a broker on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.broker_process import REPO, BrokerProcess


def keybus(broker: BrokerProcess | None, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if broker is not None:
        env["KEYBUS_BROKER"] = broker.address
    return subprocess.run([sys.executable, "-m", "keybus", *args], input=stdin, capture_output=True,
                          text=True, timeout=60, env=env, cwd=REPO)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_topics_produce_read_round_trip(shared_broker: BrokerProcess) -> None:
    ok(keybus(shared_broker, "topics", "create", "cli-orders", "--partitions", "2"))
    listed = json.loads(ok(keybus(shared_broker, "topics", "list", "--json")))
    assert "cli-orders" in [t["topic"] for t in listed]
    lines = "\n".join(json.dumps({"key": k, "value": f"v{k}", "partition": 1}) for k in range(5))
    produced = [json.loads(line) for line in ok(keybus(shared_broker, "produce", "cli-orders", "--json",
                                                       stdin=lines)).splitlines()]
    assert [p["offset"] for p in produced] == [0, 1, 2, 3, 4]
    ok(keybus(shared_broker, "produce", "cli-orders", "--key", "user-9", "--value", "hello",
              "--partition", "1"))
    read = [json.loads(line) for line in
            ok(keybus(shared_broker, "read", "cli-orders", "--partition", "1", "--json")).splitlines()]
    assert [(e["offset"], e["key"], e["value"]) for e in read] == [
        (0, 0, "v0"), (1, 1, "v1"), (2, 2, "v2"), (3, 3, "v3"), (4, 4, "v4"), (5, "user-9", "hello")]
    tail = ok(keybus(shared_broker, "read", "cli-orders", "--partition", "1", "--from", "4"))
    assert len(tail.splitlines()) == 2 and "user-9" in tail
    described = json.loads(ok(keybus(shared_broker, "topics", "describe", "cli-orders", "--json")))
    assert described["partition_info"][1]["end_offset"] == 6
    assert "cli-orders" in ok(keybus(shared_broker, "topics", "describe", "cli-orders"))


def test_window_and_filters_from_cli(shared_broker: BrokerProcess) -> None:
    ok(keybus(shared_broker, "topics", "create", "cli-window"))
    lines = "\n".join(json.dumps({"key": k, "value": "x"}) for k in range(10))
    produced = [json.loads(x) for x in ok(keybus(shared_broker, "produce", "cli-window", "--window",
                                                 "--scn", "500", "--json", stdin=lines)).splitlines()]
    assert {p["scn"] for p in produced} == {500}
    even = ok(keybus(shared_broker, "read", "cli-window", "--filter", "mod:2:[0]", "--json"))
    assert [json.loads(x)["key"] for x in even.splitlines()] == [0, 2, 4, 6, 8]
    by_scn = ok(keybus(shared_broker, "read", "cli-window", "--from", "scn:500", "--max", "3"))
    assert len(by_scn.splitlines()) == 3


def test_filters_explain_worked_example() -> None:
    out = ok(keybus(None, "filters", "explain", "range:5000000:[1,3-6]"))
    assert "5,000,000..9,999,999" in out and "15,000,000..29,999,999" in out
    assert "even" in ok(keybus(None, "filters", "explain", "mod:2:[0]"))


@pytest.mark.parametrize(("args", "stdin", "text"), [
    (("topics", "describe", "no-such-topic"), "", "does not exist"),
    (("read", "no-such-topic"), "", "does not exist"),
    (("read", "cli-bad", "--from", "yesterday"), "", "--from 'yesterday' is invalid"),
    (("read", "cli-bad", "--partition", "7"), "", "allowed 0..0"),
    (("read", "cli-bad", "--filter", "mod:0:[0]"), "", "numBuckets"),
    (("read", "cli-bad", "--ranges", "9-3"), "", "9-3"),
    (("produce", "cli-bad"), "not json\n", "line 1 is not JSON"),
    (("produce", "cli-bad"), '{"key": 1, "value": "x", "colour": 2}\n', "unknown field(s) colour"),
    (("produce", "cli-bad", "--key", "k"), "", "--key and --value go together"),
    (("topics", "create", "bad name"), "", "is invalid"),
    (("filters", "explain", "range:abc"), "", "range"),
])
def test_bad_input_one_line_and_non_zero_exit(shared_broker: BrokerProcess, args: tuple[str, ...],
                                              stdin: str, text: str) -> None:
    keybus(shared_broker, "topics", "create", "cli-bad")
    result = keybus(shared_broker, *args, stdin=stdin)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert text in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_unreachable_broker_and_unknown_option() -> None:
    result = keybus(None, "topics", "list", "--broker", "127.0.0.1:1")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    unknown = keybus(None, "topics", "list", "--colour")
    assert unknown.returncode == 2 and "No such option '--colour'" in unknown.stderr
