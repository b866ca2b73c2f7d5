"""`keybus read --follow` and `keybus consume` when the broker goes away and returns.

Goal: a long-running command never goes silent: it says on stderr within
seconds that it lost the broker and is retrying, says when it is back, and
prints what was produced afterwards; `--retry-timeout` makes it give up with
one line and exit 1.
Method: the commands as subprocesses (pipes read by threads) against a real
broker process that is SIGKILLed and restarted on the same port.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import grpc

from sdk.core.pb import keybus_pb2 as pb
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.lines import Lines
from tests.support.wire import stub


class Running:
    """A keybus subprocess whose stdout and stderr lines are read as they come."""

    def __init__(self, broker: BrokerProcess, *args: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=broker.address)
        self.process = subprocess.Popen([sys.executable, "-m", "keybus", *args], env=env, cwd=REPO,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stderr is not None
        self.lines = {"out": Lines(self.process.stdout), "err": Lines(self.process.stderr)}

    def expect(self, which: str, text: str, timeout_s: float) -> str:
        return self.lines[which].expect(text, timeout_s)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)


def produce(broker: BrokerProcess, value: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=broker.address)
    subprocess.run([sys.executable, "-m", "keybus", "produce", "lost", "--key", "1", "--value",
                    value], env=env, cwd=REPO, check=True, timeout=60, capture_output=True)


def test_follow_and_consume_tell_a_lost_broker_and_carry_on(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=broker.address)
    subprocess.run([sys.executable, "-m", "keybus", "topics", "create", "lost", "--partitions",
                    "2"], env=env, cwd=REPO, check=True, timeout=60, capture_output=True)
    commands = [Running(broker, "read", "lost", "--follow"),
                Running(broker, "consume", "lost", "-s", "s", "--start", "earliest")]
    try:
        produce(broker, "before")
        for command in commands:
            command.expect("out", ": before", 30)
        broker.kill()
        for command in commands:
            line = command.expect("err", "lost the broker", 20)
            assert line == f"keybus: lost the broker at {broker.address} (connection closed); " \
                           "retrying"
        broker.start()
        for command in commands:
            command.expect("err", f"keybus: the broker at {broker.address} is back after", 30)
        produce(broker, "after")
        for command in commands:
            command.expect("out", ": after", 30)
            assert command.process.poll() is None
    finally:
        for command in commands:
            command.stop()
        broker.stop()


def test_retry_timeout_gives_up_in_one_line(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=broker.address)
    subprocess.run([sys.executable, "-m", "keybus", "topics", "create", "lost"], env=env, cwd=REPO,
                   check=True, timeout=60, capture_output=True)
    command = Running(broker, "consume", "lost", "-s", "s", "--retry-timeout", "2")
    try:
        deadline = time.monotonic() + 30
        while not _attached(broker) and time.monotonic() < deadline:
            time.sleep(0.2)
        broker.kill()
        assert command.process.wait(30) == 1
        line = command.expect("err", "keybus: error:", 5)
        assert "did not come back within 2 s (retry_timeout_ms=2000)" in line
    finally:
        command.stop()
        broker.stop()


def _attached(broker: BrokerProcess) -> bool:
    env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=broker.address)
    done = subprocess.run([sys.executable, "-m", "keybus", "subscriptions", "list", "lost",
                           "--json"], env=env, cwd=REPO, timeout=60, capture_output=True, text=True)
    return done.returncode == 0 and '"consumers": [{' in done.stdout


def test_bootstrap_says_a_lost_broker_once_and_its_return_before_any_new_event(
        tmp_path: Path) -> None:
    """`keybus bootstrap` (following) of two partitions: one line when the broker is
    lost and one when it is back, with nothing produced after the restart. Before, it
    said the loss once per partition and the return not at all (a stream resumed
    online got nothing from the broker until the next event)."""
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=broker.address)
    subprocess.run([sys.executable, "-m", "keybus", "topics", "create", "lost", "--partitions",
                    "2"], env=env, cwd=REPO, check=True, timeout=60, capture_output=True)
    produce(broker, "before")
    command = Running(broker, "bootstrap", "lost")
    try:
        for partition in (0, 1):  # each partition's catch-up ends online
            command.expect("out", f"# online: following lost/{partition} ", 30)
        broker.kill()
        command.expect("err", "lost the broker", 20)
        broker.start()
        command.expect("err", f"keybus: the broker at {broker.address} is back after", 30)
        time.sleep(3)  # room for a second partition's report, were it said
        assert command.process.poll() is None
        said = [line for line in command.lines["err"].seen if broker.address in line]
        assert said[0] == f"keybus: lost the broker at {broker.address} (connection closed); " \
                          "retrying"
        assert len(said) == 2, said
    finally:
        command.stop()
        broker.stop()


def test_produce_says_a_lost_broker_and_its_return_and_stores_every_line_once(
        tmp_path: Path) -> None:
    """`keybus produce` of many lines whose broker is killed mid-way and restarted: it
    says on stderr that it lost the broker and, in the same words as the other
    commands' lines, that the broker answers again; every line is stored once. Before,
    only the loss was printed (bare, by Python's last-resort handler), never the return."""
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=broker.address)
    subprocess.run([sys.executable, "-m", "keybus", "topics", "create", "many"], env=env,
                   cwd=REPO, check=True, timeout=60, capture_output=True)
    count = 150_000
    lines = tmp_path / "lines.jsonl"
    lines.write_text("".join(f'{{"key": {i}, "value": "v{i}"}}\n' for i in range(count)))
    with lines.open() as stdin:
        process = subprocess.Popen([sys.executable, "-m", "keybus", "produce", "many",
                                    "--timeout", "60"], env=env, cwd=REPO, stdin=stdin,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    out, err = Lines(process.stdout), Lines(process.stderr)
    try:
        began = time.monotonic()
        while end_offset(broker.address, "many") < 1_000:
            assert time.monotonic() - began < 60, "the produce stored nothing within 60 s"
            assert process.poll() is None, f"produce ended early: {process.returncode}"
            time.sleep(0.05)
        broker.kill()
        lost = err.expect("lost the broker", 20)
        # one line, naming the broker it was talking to
        assert re.fullmatch(rf"keybus: producer of topic 'many' lost the broker at "
                            rf"{re.escape(broker.address)} \([^()]+\); retrying; events not "
                            r"answered within delivery_timeout_ms=60000 fail", lost), lost
        broker.start()
        back = err.expect("answers again", 30)
        assert re.fullmatch(rf"keybus: producer of topic 'many': the broker at "
                            rf"{re.escape(broker.address)} answers again after [0-9.]+ s",
                            back), back
        assert process.wait(120) == 0, err.expect("error", 1)
        out.expect(f"many/0 offset {count - 1} ", 30)
        assert end_offset(broker.address, "many") == count  # once each: none stored twice
    finally:
        process.kill()
        process.wait(10)
        broker.stop()


def end_offset(address: str, topic: str) -> int:
    """The broker's end of partition 0 (-1 when it does not answer)."""
    try:
        info = stub(address).DescribeTopic(pb.DescribeTopicRequest(topic=topic), timeout=2)
    except grpc.RpcError:
        return -1
    return int(info.partitions[0].end_offset)
