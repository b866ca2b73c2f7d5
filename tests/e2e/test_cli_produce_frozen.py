"""`keybus produce` over a broker that freezes mid-input: true words, no repr.

Goal: lines sent and not answered within --timeout (the SDK's delivery
timeout, whose message says the events "may or may not be stored") are called
"not confirmed", never "not stored", and nothing on stderr is a Python repr or
a traceback (it printed `produce stream for topic ... broke
(KeybusError('Deadline Exceeded'))` and `lines ... not stored: ...; the events
may or may not be stored`).
Method: a real broker process; `python -m keybus produce` of 100,000 lines as
a subprocess; once the broker stored some, SIGSTOP (always resumed in finally);
the command's exit status and stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from sdk import Admin
from tests.e2e.test_cli import keybus, ok
from tests.support.broker_process import REPO, BrokerProcess

LINES = 100_000


async def _end_offset(address: str, topic: str) -> int:
    async with Admin(address, request_timeout_ms=2_000) as admin:
        info = await admin.describe_topic(topic)
    return int(info.partitions[0].end_offset)


def test_a_broker_frozen_under_produce_is_said_truly_and_in_words(
        broker: BrokerProcess, tmp_path: Path) -> None:
    ok(keybus(broker, "topics", "create", "frozen-produce"))
    source = tmp_path / "lines.json"
    source.write_text("".join(json.dumps({"key": n, "value": "x" * 100}) + "\n"
                              for n in range(LINES)))
    env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=broker.address)
    assert broker.process is not None
    with open(source) as stdin, open(tmp_path / "out", "w") as out, \
            open(tmp_path / "err", "w") as err:
        produce = subprocess.Popen([sys.executable, "-m", "keybus", "produce", "frozen-produce",
                                    "--timeout", "4"], stdin=stdin, stdout=out, stderr=err,
                                   env=env, cwd=REPO)
        try:
            deadline = time.monotonic() + 60
            while asyncio.run(_end_offset(broker.address, "frozen-produce")) == 0:
                assert produce.poll() is None, "produce ended before the broker froze"
                assert time.monotonic() < deadline, "nothing stored within 60 s"
                time.sleep(0.05)
            os.kill(broker.process.pid, signal.SIGSTOP)
            status = produce.wait(timeout=90)
        finally:
            os.kill(broker.process.pid, signal.SIGCONT)
            if produce.poll() is None:
                produce.kill()
                produce.wait()
    stderr = (tmp_path / "err").read_text()
    stored = len((tmp_path / "out").read_text().splitlines())
    assert status == 1, stderr
    assert "Traceback" not in stderr and not re.search(r"[A-Za-z]+\('", stderr), stderr
    last = stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"keybus: error: lines {stored + 1}-{LINES} not confirmed: no answer from the broker "
        rf"at {re.escape(broker.address)} within delivery_timeout_ms=4000.*; the events may or "
        r"may not be stored; "
        rf"lines 1-{stored} stored \(printed on stdout\)", last), (last, stored)
