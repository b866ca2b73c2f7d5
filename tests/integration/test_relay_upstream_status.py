"""What `keybus cluster status` and the relay metrics say of a follower's upstream is true.

Goal: an idle but healthy upstream keeps "read s ago" (and
keybus_relay_seconds_since_upstream_read) near its one-second idle answer, so
an alert on it does not fire for a quiet topic; an upstream that is gone
shows the lag as unknown ("-", null, no lag series) with "unreachable since",
not as 0 ("caught up"), until it is back; and the follower's log names a
failed attempt in one line (address, status code, details, the next retry),
never gRPC's resolver or debug text.

Method: a leader and its follower as real broker processes on 127.0.0.1
(tests/support/relay_pair.py), the leader killed with SIGKILL and started
again on its port; the real `keybus cluster status` command, the follower's
metrics over HTTP and its log file. Bounded waits only.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from keybus.dev_cluster import BrokerRunner, free_port
from tests.support.metrics import metrics_text
from tests.support.relay_cluster import events, wait_for
from tests.support.relay_pair import broker, produce_records
from tests.support.wire import create_topic, stub

# Quiet longer than an idle answer's interval (1 s) and the sweep's (1 s) with room.
QUIET_S = 8.0


def pair(root: Path) -> tuple[BrokerRunner, BrokerRunner, int]:
    """(leader, follower of its topic t, the follower's metrics port), not started."""
    leader = broker(root, "leader", "[replication.t]\n")
    metrics_port = free_port()
    follower = broker(root, "follower", (
        f"metrics_port = {metrics_port}\nrelay_retry_backoff_ms = 50\n"
        f"relay_retry_backoff_max_ms = 400\n[replication.t]\nupstream = \"{leader.address}\"\n"))
    return leader, follower, metrics_port


def status(address: str, *extra: str) -> str:
    done = subprocess.run([sys.executable, "-m", "keybus", "cluster", "status", "--broker",
                           address, "--topic", "t", "--timeout", "20", *extra],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def partition_row(address: str) -> dict[str, Any]:
    (row,) = json.loads(status(address, "--json"))["topics"][0]["brokers"]
    (partition,) = row["partitions"]
    return partition  # type: ignore[no-any-return]


def sample(port: int, name: str) -> float | None:
    found = re.search(rf'^{name}\{{partition="0",topic="t"\}} (\S+)$', metrics_text(port),
                      re.MULTILINE)
    return float(found[1]) if found else None


def test_an_idle_upstream_is_heard_so_read_s_ago_stays_small(tmp_path: Path) -> None:
    leader, follower, port = pair(tmp_path)
    try:
        leader.start()
        follower.start()
        create_topic(stub(leader.address), "t")
        produce_records(leader.address, 0, 1, 10)
        wait_for(lambda: events(follower.address, "t") == 10, 15, "the follower copied")
        time.sleep(QUIET_S)  # nothing produced: the upstream is healthy and idle
        age = sample(port, "keybus_relay_seconds_since_upstream_read")
        read_ago = partition_row(follower.address)["upstream_read_s_ago"]
        print(f"after {QUIET_S} s idle: gauge {age} s, cluster status {read_ago} s")
        assert age is not None and 0 <= age < QUIET_S / 2, age
        assert read_ago is not None and read_ago < QUIET_S / 2, read_ago
        assert sample(port, "keybus_relay_upstream_reachable") == 1
    finally:
        follower.stop()
        leader.stop()


def test_an_upstream_gone_shows_the_lag_unknown_and_since_when_until_it_is_back(
        tmp_path: Path) -> None:
    leader, follower, port = pair(tmp_path)
    try:
        leader.start()
        follower.start()
        create_topic(stub(leader.address), "t")
        produce_records(leader.address, 0, 2, 10)
        wait_for(lambda: partition_row(follower.address)["lag_events"] == 0
                 and events(follower.address, "t") == 20, 15, "caught up, lag 0")
        leader.kill()
        wait_for(lambda: partition_row(follower.address)["lag_events"] is None, 30,
                 "cluster status shows the lag unknown (it showed 0, 'caught up')")
        row = partition_row(follower.address)
        assert row["lag_s"] is None and row.get("upstream_unreachable_s") is not None, row
        table = status(follower.address, "--wide")
        (line,) = [line for line in table.splitlines()
                   if line.split()[:2] == ["t", follower.address]]
        assert line.split()[7:9] == ["-", "-"], line  # lag, lag s
        assert re.search(rf"upstream {leader.address} unreachable since [\d.]+ s ago for "
                         r"partition\(s\) 0; lag unknown", " ".join(table.split())), table
        wait_for(lambda: sample(port, "keybus_relay_upstream_reachable") == 0, 10,
                 "the reachable gauge says 0")
        assert sample(port, "keybus_relay_follower_lag_events") is None  # no claim of 0
        leader.start()  # back on its port, with its log
        wait_for(lambda: partition_row(follower.address)["lag_events"] == 0, 30,
                 "the lag known again once the upstream answers")
        assert partition_row(follower.address)["upstream_unreachable_s"] is None
        wait_for(lambda: sample(port, "keybus_relay_upstream_reachable") == 1, 10,
                 "the reachable gauge back to 1")
    finally:
        follower.stop()
        leader.stop()


def test_a_frozen_upstream_shows_the_lag_unknown_before_its_stream_breaks(
        tmp_path: Path) -> None:
    """SIGSTOP keeps the upstream's connection open: its stream breaks only when the
    keepalive gives up, 14-15 s on (sdk/core/keepalive.py). Its idle answers stop
    at once, and silence past upstream_silence_ms (3 s) is what the follower shows."""
    leader, follower, port = pair(tmp_path)
    try:
        leader.start()
        follower.start()
        create_topic(stub(leader.address), "t")
        produce_records(leader.address, 0, 2, 10)
        wait_for(lambda: partition_row(follower.address)["lag_events"] == 0
                 and events(follower.address, "t") == 20, 15, "caught up, lag 0")
        os.kill(leader.pid, signal.SIGSTOP)
        # well before the keepalive's 14 s, with room for a loaded machine
        took = wait_for(lambda: sample(port, "keybus_relay_upstream_reachable") == 0, 10,
                        "the reachable gauge says 0 before the keepalive ends the stream")
        print(f"a frozen upstream counted unreachable after {took:.1f} s")
        row = partition_row(follower.address)
        assert row["lag_events"] is None and row["upstream_unreachable_s"] is not None, row
        assert sample(port, "keybus_relay_follower_lag_events") is None  # no claim of 0
        os.kill(leader.pid, signal.SIGCONT)
        wait_for(lambda: partition_row(follower.address)["lag_events"] == 0, 30,
                 "the lag known again once the upstream answers")
        wait_for(lambda: sample(port, "keybus_relay_upstream_reachable") == 1, 10,
                 "the reachable gauge back to 1")
    finally:
        if leader.running():
            os.kill(leader.pid, signal.SIGCONT)
        follower.stop()
        leader.stop()


def test_a_failed_attempt_is_one_line_with_the_status_code_and_the_next_retry(
        tmp_path: Path) -> None:
    leader, follower, _ = pair(tmp_path)  # the leader never starts: its port is closed
    try:
        follower.start()
        wait_for(lambda: len(re.findall("retry in", follower.log_path.read_text())) >= 3, 20,
                 "three failed attempts")
        lines = [line for line in follower.log_path.read_text().splitlines()
                 if "keybus.relay" in line and "retry in" in line]
        for line in lines:
            assert re.search(rf"cannot set up the copy from {leader.address} "
                             r"\(UNAVAILABLE: connection refused\); retry in \d+ ms$", line), line
        log = follower.log_path.read_text()
        assert "failed to connect to all addresses" not in log, log[-2000:]
        assert "debug_error_string" not in log and "AioRpcError" not in log, log[-2000:]
    finally:
        follower.stop()


def test_a_lost_stream_is_one_line_with_the_status_code_and_the_upstreams_words(
        tmp_path: Path) -> None:
    """The Reader's stream from an upstream killed under it: the follower says which
    topic and partition lost it, from which upstream, with the status code and the
    words (as a failed attempt's line), and that it is back. Before, it logged the
    SDK's `lost the broker at H:P (connection closed); retrying` alone: no topic, no
    code, so an upstream gone read as one that refused."""
    leader, follower, _ = pair(tmp_path)
    try:
        leader.start()
        follower.start()
        create_topic(stub(leader.address), "t")
        produce_records(leader.address, 0, 1, 10)
        wait_for(lambda: events(follower.address, "t") == 10, 15, "the follower copied")
        leader.kill()

        def lost() -> list[str]:
            return [line for line in follower.log_path.read_text().splitlines()
                    if "lost the stream" in line]
        wait_for(lambda: bool(lost()), 30, "the follower says it lost the stream")
        (line,) = lost()  # once per outage, not per retry
        assert "keybus.relay" in line, line
        # grpcio's words for the connection the killed upstream dropped ("Stream removed
        # (Socket closed)", "Connection reset by peer", ...) or, once gone, refused
        assert re.search(rf"topic t/0: lost the stream from upstream {leader.address} "
                         r"\(UNAVAILABLE: .+\); retrying$", line), line
        leader.start()  # back on its port, with its log
        wait_for(lambda: f"topic t/0: the broker at {leader.address} is back after"
                 in follower.log_path.read_text(), 30, "the follower says it is back")
        log = follower.log_path.read_text()
        assert "debug_error_string" not in log and "AioRpcError" not in log, log[-2000:]
    finally:
        follower.stop()
        leader.stop()
