"""`keybus read --start latest --follow` says when it is positioned, and prints
what is produced from then on.

Goal: a script can start the read, wait for its note on stderr (`reading from
the end: T/0 at offset N, ...`) and then produce: every event stored after the
note is printed. Before, the command said nothing, and its reads resolved
"latest" in background tasks after it started, so an event produced at once
could be skipped.
Method: the command as a subprocess (pipes read by threads) against the
shared broker; the events are produced with the SDK once the note is seen.
"""

from __future__ import annotations

import os
import subprocess
import sys

from sdk import SyncProducer
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.lines import Lines

PARTITIONS = 3


def test_read_from_latest_tells_its_position_then_prints_what_comes(
        shared_broker: BrokerProcess) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), KEYBUS_BROKER=shared_broker.address)
    subprocess.run([sys.executable, "-m", "keybus", "topics", "create", "cli-latest",
                    "--partitions", str(PARTITIONS)], env=env, cwd=REPO, check=True, timeout=60,
                   capture_output=True)
    with SyncProducer.create(shared_broker.address, "cli-latest") as producer:
        producer.send(1, b"old", partition=1).result(30)
        process = subprocess.Popen(
            [sys.executable, "-m", "keybus", "read", "cli-latest", "--start", "latest",
             "--follow", "--max", str(PARTITIONS)], env=env, cwd=REPO,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert process.stdout is not None and process.stderr is not None
        out, err = Lines(process.stdout), Lines(process.stderr)
        try:
            line = err.expect("reading from the end", 30)
            assert line == ("keybus: reading from the end: cli-latest/0 at offset 0, "
                            "cli-latest/1 at offset 1, cli-latest/2 at offset 0; waiting for "
                            "new events")
            for p in range(PARTITIONS):
                producer.send(p, b"new %d" % p, partition=p).result(30)
            for p in range(PARTITIONS):
                out.expect(f": new {p}", 30)
            assert process.wait(30) == 0  # --max: it printed all three, none before them
            assert ": old" not in "\n".join(out.seen)
        finally:
            process.kill()
            process.wait(10)
