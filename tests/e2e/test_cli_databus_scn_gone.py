"""`keybus databus tail --from-scn N` with N below what the log holds says so.

Goal: when retention removed a partition's first events and its first
stored event has an SCN past N, the tail still starts at the first stored
window (as before) but first prints one line on stderr saying the events
before the start are gone, naming the partition's first SCN and offset.
Before, it began there without a word: a user asking for SCN 1 could not
tell "nothing between 1 and 3" from "removed". N at or past the first
stored SCN, or a log retention never cut, prints no note.
Method: `python -m keybus ...` as a subprocess against a real broker that
applies retention every 50 ms; a topic whose retention_bytes holds two of its
20 KB windows, four produced (size, not age: nothing more goes meanwhile).
"""

from __future__ import annotations

import json
import time

from sdk.core.pb import keybus_pb2 as pb
from tests.e2e.test_cli import keybus, ok
from tests.support.broker_process import BrokerProcess
from tests.support.wire import stub

VALUE = "v" * 20_000


def _cut_topic(broker: BrokerProcess, topic: str) -> int:
    """Four one-event windows (SCNs 1..4); retention removes the first two: the start offset."""
    ok(keybus(broker, "topics", "create", topic, "--retention-bytes", "50000"))
    for key in range(1, 5):
        ok(keybus(broker, "produce", topic, "--window",
                  stdin=json.dumps({"key": key, "value": VALUE, "source": "a"})))
    deadline = time.monotonic() + 20
    while True:
        info = stub(broker.address).DescribeTopic(pb.DescribeTopicRequest(topic=topic),
                                                  timeout=10).partitions[0]
        if info.start_offset >= 2:
            return int(info.start_offset)
        assert time.monotonic() < deadline, f"retention did not cut: {info}"
        time.sleep(0.05)


def test_a_from_scn_below_the_start_is_said_once_on_stderr(
        retention_broker: BrokerProcess) -> None:
    start = _cut_topic(retention_broker, "scn-gone")
    first_scn = start + 1  # one window per record, SCNs from 1
    result = keybus(retention_broker, "databus", "tail", "scn-gone", "--from-scn", "1",
                    "--windows", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"StartDataEventSequence({first_scn}) -->"), result.stdout
    assert result.stderr.splitlines() == [
        f"keybus: --from-scn 1 is before the start of scn-gone: events before the start are "
        f"gone (removed by retention; partition 0 starts at SCN {first_scn} (offset {start}));"
        " starting at the first event stored"], result.stderr
    at_start = keybus(retention_broker, "databus", "tail", "scn-gone", "--from-scn",
                      str(first_scn), "--windows", "1")
    assert at_start.returncode == 0 and at_start.stderr == "", at_start.stderr
