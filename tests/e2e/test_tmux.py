"""The main CLI flows in a real 80-column terminal (tmux), checked on screen.

Goal: what a user sees in an 80x50 terminal: every line fits (none wraps),
no name is cut ('…' never appears), the range bars are whole and on a scale,
reads cover every partition, long work shows rich's progress bar, errors are
one line, a produce typed by hand sends each line, and a consume that loses its
broker says so and carries on.
Method: a private tmux server (tests/support/tmux.py; Debian's tmux,
installed when missing) running bash with the repository's `keybus` on PATH,
against a real broker process; the test types commands and reads the screen.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import REPO, BrokerProcess
from tests.support.debian import ensure_program
from tests.support.tmux import Tmux

WIDTH = 80
SUB = "billing-for-the-european-warehouse"
NAMES = ("alice", "bob", "a-consumer-with-a-rather-long-name")


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[tuple[Tmux, BrokerProcess]]:
    missing = ensure_program("tmux", "tmux")
    if missing:
        pytest.skip(f"tmux unavailable: {missing}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "keybus").write_text(f"#!/bin/sh\nexec {sys.executable} -m keybus \"$@\"\n")
    (bin_dir / "keybus").chmod(0o755)
    broker = BrokerProcess(tmp_path / "data")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(REPO), KEYBUS_BROKER=broker.address, TERM="xterm-256color")
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    tmux = Tmux(tmp_path, env, WIDTH, 50)
    try:
        broker.start()
        tmux.start()
        tmux.run(f"cd {tmp_path}")
        yield tmux, broker
    finally:
        tmux.kill()
        broker.stop()


def fits(lines: list[str]) -> None:
    """Every line fits 80 columns (joined lines: one that wrapped is longer) and nothing is cut."""
    assert all(len(line) <= WIDTH for line in lines), "\n".join(lines)
    assert not any("…" in line for line in lines), "\n".join(lines)


def test_main_flows_at_80_columns(terminal: tuple[Tmux, BrokerProcess], tmp_path: Path) -> None:
    tmux, _ = terminal
    assert tmux.run("keybus topics create tm-orders --partitions 4")[0] == 0
    code, lines = tmux.run("""echo '{"key": 42, "value": "hello", "ordering_key": "customer-7"}' """
                           "| keybus produce tm-orders")
    assert (code, lines) == (0, ["tm-orders/2 offset 0 scn 1"])
    code, lines = tmux.run("keybus read tm-orders")
    assert (code, lines) == (0, ["tm-orders/2 offset 0 scn 1 key 42 slot 53910: hello"])

    # Typed by hand: each line is sent as it is entered; a bad one is told and skipped.
    tmux.clear()
    tmux.send("keybus produce tm-orders; echo @@typed")
    tmux.wait_for("Ctrl-D ends")
    tmux.send('{"key": 7, "value": "typed"}')
    tmux.wait_for("tm-orders/0 offset 0 scn 1")
    tmux.send("oops")
    tmux.wait_for("is not JSON: Expecting value (not sent)")
    tmux.keys("C-d")
    tmux.wait_for("\n@@typed")

    # Long work in the terminal shows rich's bar while it runs (transient); in a pipe, none.
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({"key": k, "value": "v"}) + "\n" for k in range(12_000)))
    for n, (command, bar) in enumerate((
            ("keybus produce tm-orders < events.jsonl", "producing to tm-orders"),
            ("keybus read tm-orders", "reading tm-orders"))):
        tmux.clear()
        sent = tmp_path / f"sent-{n}.bin"
        tmux.record(sent)
        tmux.send(f"{command}; echo @@done{n}")
        screen = tmux.wait_for(f"\n@@done{n}", 180)
        tmux.stop_recording()
        raw = sent.read_bytes().decode(errors="replace")
        assert bar in raw and "━" in raw.split(bar, 1)[1][:400], raw[-500:]  # the bar was drawn
        left = [line for line in screen.splitlines() if bar in line]
        assert not left, left  # and is gone, scrollback too (transient)
    code, lines = tmux.run("keybus read tm-orders | tail -1")
    assert code == 0 and lines[0].startswith("tm-orders/") and "reading" not in "".join(lines)

    # Tables: names whole, within 80 columns.
    code, lines = tmux.run("keybus topics list")
    assert code == 0 and any(line.startswith("tm-orders") for line in lines)
    fits(lines)
    code, lines = tmux.run("keybus topics describe tm-orders")
    fits(lines)

    consumers = [subprocess.Popen(
        [sys.executable, "-m", "keybus", "consume", "tm-orders", "-s", SUB, "--type",
         "key_shared", "--mode", "auto_split", "--name", name], env=dict(tmux.env), cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for name in NAMES]
    try:
        code, lines = tmux.run(f"keybus subscriptions describe tm-orders {SUB}")
        for _ in range(100):  # until all three have joined every partition
            if code == 0 and sum(line.startswith(NAMES) for line in lines) >= 24:
                break
            code, lines = tmux.run(f"keybus subscriptions describe tm-orders {SUB}")
        fits(lines)
        bars = [line for line in lines if "█" in line and not line.startswith("hash ranges")]
        assert len(bars) == 4 * len(NAMES), "\n".join(lines)
        for name in NAMES:
            assert any(line.startswith(name) for line in lines)
        cells = {len(line.split()[-1]) for line in bars}
        assert cells == {WIDTH - len(NAMES[2]) - 2}, "\n".join(lines)  # one scale, whole bars
        code, lines = tmux.run("keybus subscriptions list tm-orders")
        fits(lines)
        assert any(line.startswith(SUB) for line in lines)
        code, lines = tmux.run(f"keybus subscriptions describe tm-orders {SUB} --wide")
        assert code == 0 and any(len(line.split()[-1]) == 128 for line in lines if "█" in line)
    finally:
        for consumer in consumers:
            consumer.kill()
            consumer.wait(10)

    # One line for an error, with the documented exit status.
    code, lines = tmux.run("keybus read no-such-topic")
    assert code == 1 and len(lines) == 1 and lines[0].startswith("keybus: error: topic ")
    code, lines = tmux.run("keybus read tm-orders --start yesterday")
    assert code == 2 and len(lines) == 1


def wait_persisted(address: str, topic: str, subscription: str, partition: int,
                   offset: int, timeout_s: float = 20) -> None:
    """Until the subscription's cursor on disk acknowledges everything below `offset`."""
    from sdk.subscription_admin import SubscriptionAdmin

    async def persisted() -> int:
        async with SubscriptionAdmin(address) as admin:
            info = await admin.describe_subscription(topic, subscription)
        return next(p.persisted_mark_delete for p in info.partitions
                    if p.partition == partition)

    deadline = time.monotonic() + timeout_s
    while asyncio.run(persisted()) < offset:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}/{partition} not persisted past {offset} in {timeout_s}s")
        time.sleep(0.05)


def test_consume_tells_a_lost_broker_and_carries_on(terminal: tuple[Tmux, BrokerProcess]) -> None:
    tmux, broker = terminal
    assert tmux.run("keybus topics create tm-live --partitions 2")[0] == 0
    tmux.clear()
    tmux.send("keybus consume tm-live -s live --type shared --start earliest")
    subprocess.run([sys.executable, "-m", "keybus", "produce", "tm-live", "--key", "1", "--value",
                    "before"], env=tmux.env, cwd=REPO, check=True, timeout=60)
    tmux.wait_for("before")
    # kill only once the ack of "before" is on disk, or the consumer is sent it again
    # (at least once: a cursor is written every cursor_persist_interval_ms)
    wait_persisted(broker.address, "tm-live", "live", partition=1, offset=1)
    broker.kill()
    tmux.wait_for(f"keybus: lost the broker at {broker.address}", 20)
    broker.start()
    tmux.wait_for(f"keybus: the broker at {broker.address} is back after", 30)
    subprocess.run([sys.executable, "-m", "keybus", "produce", "tm-live", "--key", "2", "--value",
                    "after"], env=tmux.env, cwd=REPO, check=True, timeout=60)
    tmux.wait_for(": after")
    tmux.keys("C-c")
    screen = tmux.wait_for("2 event(s)", 20)
    assert "Traceback" not in screen
    fits(screen.splitlines())
