"""`keybus bootstrap` and the view columns of `keybus topics describe`.

Goal: the command prints the snapshot (latest event per key, deleted keys
absent unless --tombstones), then the catch-up, with a marker line per
phase, filtered by --source and --filter; describe shows the view's SCN,
lag, keys and bytes; a topic without a view gets one clear error line.
Method: `python -m keybus` subprocesses against the shared broker process.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import grpc

from sdk import Admin
from sdk.channel import stub_of
from sdk.core.pb import keybus_pb2 as pb
from tests.e2e.test_cli import keybus, ok
from tests.e2e.test_cli_lost_broker import Running
from tests.support.bootstrap_model import wait_for_partition
from tests.support.broker_process import BrokerProcess


def _lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def _wait_view(broker: BrokerProcess, topic: str, end: int) -> None:
    asyncio.run(wait_for_partition(broker.address, topic, lambda p: p.view_offset == end,
                                   "the view"))


def test_bootstrap_prints_the_state_then_the_catch_up(shared_broker: BrokerProcess) -> None:
    ok(keybus(shared_broker, "topics", "create", "cli-state", "--view"))
    events = [{"key": k, "value": f"v{k}", "source": "orders"} for k in range(6)]
    events += [{"key": 1, "value": "again", "source": "orders"},
               {"key": 2, "value": "", "source": "orders", "opcode": 1},
               {"key": 9, "value": "acct", "source": "accounts"}]
    ok(keybus(shared_broker, "produce", "cli-state", "--partition", "0",
              stdin="\n".join(json.dumps(e) for e in events)))
    _wait_view(shared_broker, "cli-state", 9)
    described = json.loads(ok(keybus(shared_broker, "topics", "describe", "cli-state", "--json")))
    info = described["partition_info"][0]
    assert (info["view_keys"], info["view_tombstones"]) == (7, 1)  # type: ignore[index]
    assert "view keys" in ok(keybus(shared_broker, "topics", "describe", "cli-state"))

    out = _lines(ok(keybus(shared_broker, "bootstrap", "cli-state", "--no-follow", "--json")))
    assert [line["marker"] for line in out if "marker" in line] == ["snapshot", "catchup"]
    snapshot = [(e["source"], e["key"], e["value"], e["offset"]) for e in out
                if e.get("phase") == "snapshot"]
    assert snapshot == [("accounts", 9, "acct", 8), ("orders", 0, "v0", 0),
                        ("orders", 1, "again", 6), ("orders", 3, "v3", 3),
                        ("orders", 4, "v4", 4), ("orders", 5, "v5", 5)]
    filtered = _lines(ok(keybus(shared_broker, "bootstrap", "cli-state", "--no-follow", "--json",
                                "--source", "orders", "--filter", "mod:2:[0]", "--tombstones")))
    assert [(e["key"], e["opcode"]) for e in filtered if "phase" in e] == [
        (0, "UPSERT"), (2, "DELETE"), (4, "UPSERT")]
    text = ok(keybus(shared_broker, "bootstrap", "cli-state", "--max", "2"))  # follows: --max ends it
    assert text.splitlines()[0].startswith("# snapshot of cli-state/0")
    assert len(text.splitlines()) == 3


def test_bootstrap_of_a_topic_without_view_is_one_error_line(shared_broker: BrokerProcess) -> None:
    ok(keybus(shared_broker, "topics", "create", "cli-no-view", "--no-view"))
    result = keybus(shared_broker, "bootstrap", "cli-no-view", "--no-follow")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "keeps no compacted view" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_bootstrap_covers_every_partition_unless_told(shared_broker: BrokerProcess) -> None:
    ok(keybus(shared_broker, "topics", "create", "cli-state-2", "--partitions", "2", "--view"))
    for partition in (0, 1):
        ok(keybus(shared_broker, "produce", "cli-state-2", "--partition", str(partition),
                  "--key", str(10 + partition), "--value", f"p{partition}"))
        _wait_view_of(shared_broker, "cli-state-2", partition, 1)
    out = _lines(ok(keybus(shared_broker, "bootstrap", "cli-state-2", "--no-follow", "--json")))
    markers = sorted((line["partition"], line["marker"]) for line in out if "marker" in line)
    assert markers == [(0, "catchup"), (0, "snapshot"), (1, "catchup"), (1, "snapshot")]
    assert sorted((e["partition"], e["key"]) for e in out if "phase" in e) == [(0, 10), (1, 11)]
    narrowed = _lines(ok(keybus(shared_broker, "bootstrap", "cli-state-2", "--partition", "1",
                                "--no-follow", "--json")))
    assert [(e["partition"], e["key"]) for e in narrowed if "phase" in e] == [(1, 11)]


def _wait_view_of(broker: BrokerProcess, topic: str, partition: int, end: int) -> None:
    """Poll `topics describe` until the partition's view reached `end` (bounded)."""
    deadline = time.monotonic() + 60
    while True:
        info = json.loads(ok(keybus(broker, "topics", "describe", topic, "--json")))
        if info["partition_info"][partition]["view_offset"] == end:
            return
        assert time.monotonic() < deadline, f"the view of {topic}/{partition}: {info}"
        time.sleep(0.1)


async def _views_folded(broker: BrokerProcess, topic: str, end: int) -> None:
    """Wait (bounded) until every partition's view folded its log up to `end`."""
    deadline = time.monotonic() + 60
    async with Admin(broker.address) as admin:
        while not all(p.view_offset == end for p in (await admin.describe_topic(topic)).partitions):
            assert time.monotonic() < deadline, "the views did not fold the log"
            await asyncio.sleep(0.1)


def test_bootstrap_waits_for_a_slot_of_a_busy_broker(tmp_path: Path) -> None:
    """Every partition is bootstrapped side by side; with more partitions than the
    broker's bootstrap slots (here one) the command failed at once with "retry
    later" (exit 1, nothing printed). It now waits for a slot, says so once, and
    prints every partition's state."""
    broker = BrokerProcess(tmp_path / "data", "--bootstrap-streams-max", "1")
    broker.start()
    try:
        ok(keybus(broker, "topics", "create", "cli-slots", "--partitions", "3"))
        for partition in range(3):
            events = [{"key": k, "value": f"{partition}-{k}".ljust(100, "."),
                       "partition": partition} for k in range(2_000)]
            ok(keybus(broker, "produce", "cli-slots",
                      stdin="\n".join(json.dumps(e) for e in events)))
        asyncio.run(_views_folded(broker, "cli-slots", 2_000))
        result = keybus(broker, "bootstrap", "cli-slots", "--no-follow", "--json")
    finally:
        broker.stop()
    printed = [line for line in _lines(ok(result)) if "marker" not in line]
    assert sorted((e["partition"], e["key"]) for e in printed) == \
        [(p, k) for p in range(3) for k in range(2_000)]
    assert "Traceback" not in result.stderr


def test_bootstrap_notes_its_wait_for_a_slot_through_the_reader(tmp_path: Path) -> None:
    """The wait for a slot lives in the SDK's Reader now, not in the command: its
    note names the broker and says when the partition got its slot (before, only
    the wait was said, in the command's own words). --timeout is idle time: a wait
    for a slot longer than it does not end the partition. Method: the test holds
    the broker's one slot (an unread Bootstrap stream of a 400 KB topic on a
    channel without BDP probing) for longer than --timeout, then frees it."""
    broker = BrokerProcess(tmp_path / "data", "--bootstrap-streams-max", "1")
    broker.start()
    holder: grpc.Channel | None = None
    command: Running | None = None
    try:
        ok(keybus(broker, "topics", "create", "cli-wait"))
        ok(keybus(broker, "topics", "create", "cli-held"))
        ok(keybus(broker, "produce", "cli-wait", stdin="\n".join(
            json.dumps({"key": k, "value": f"v{k}"}) for k in range(300))))
        ok(keybus(broker, "produce", "cli-held", stdin="\n".join(
            json.dumps({"key": k, "value": "x" * 2_000}) for k in range(200))))
        holder = grpc.insecure_channel(broker.address, options=[("grpc.http2.bdp_probe", 0)])
        held = stub_of(holder).Bootstrap(pb.BootstrapRequest(topic="cli-held", bytes_max=4_096))
        next(held)  # the stream is open: it holds the slot
        command = Running(broker, "bootstrap", "cli-wait", "--json", "--timeout", "1")
        waits = command.expect("err", "waits for a bootstrap slot", 30)
        assert waits.startswith(f"keybus: cli-wait/0 waits for a bootstrap slot of the broker "
                                f"at {broker.address} ("), waits
        assert "bootstrap_streams_max" in waits  # the broker's words, with its limit
        time.sleep(3)  # held past --timeout: the wait is not idle time
        holder.close()
        holder = None
        got = command.expect("err", "got a bootstrap slot", 30)
        assert got.startswith(f"keybus: cli-wait/0 got a bootstrap slot of the broker at "
                              f"{broker.address} after "), got
        assert command.process.wait(60) == 0
        out = command.lines["out"].until_end(30)
    finally:
        if holder is not None:
            holder.close()
        if command is not None and command.process.poll() is None:
            command.stop()
        broker.stop()
    printed = [json.loads(line) for line in out]
    assert sorted(e["key"] for e in printed if "marker" not in e) == list(range(300))
    assert "lost the broker" not in "\n".join(command.lines["err"].seen)
