"""Crash safety and restart cost of the RocksDB log, with a real broker process.

Goal: nothing acknowledged to a producer is lost by SIGKILL; a window is
stored whole or not at all; restart time does not grow with the log.
Method: a producer thread streams windows of distinct keys while the test
SIGKILLs the broker at a random moment (seeded, printed on failure), restarts
it on the same data dir, and checks every acknowledged window is there, whole,
at the offsets it was acknowledged with. Bounded: 20 kills, 127.0.0.1 only.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import grpc

from sdk.core.pb import keybus_pb2 as pb
from tests.support.broker_process import BrokerProcess
from tests.support.wire import create_topic, int_batch, read_all, stub

KILLS = 20
WINDOW_EVENTS = 200


class AckRecorder:
    """Streams windows until the broker dies; keeps what was acknowledged."""

    def __init__(self, address: str, first_key: int) -> None:
        self.address = address
        self.next_key = first_key
        self.acked: dict[int, tuple[int, int]] = {}  # base_offset -> (first key, count)
        self.sent_first_keys: set[int] = set()

    def run(self) -> None:
        client = stub(self.address)
        pending: dict[int, int] = {}

        def requests():  # type: ignore[no-untyped-def]
            for request_id in range(1, 1_000_000):
                first = self.next_key
                self.next_key += WINDOW_EVENTS
                pending[request_id] = first
                self.sent_first_keys.add(first)
                batch = int_batch(list(range(first, first + WINDOW_EVENTS)))
                yield pb.ProduceRequest(topic="crash", window=True, batch=batch,
                                        request_id=request_id)

        try:
            for response in client.Produce(requests(), timeout=60):
                assert response.error_code == 0, response.error_message
                first = pending.pop(response.request_id)
                self.acked[response.base_offset] = (first, response.count)
        except grpc.RpcError:
            return  # the broker died: expected


def check_log(address: str, recorder: AckRecorder, seed: int) -> None:
    records = read_all(stub(address), "crash")
    offset = 0
    for record in records:
        assert record.base_offset == offset, f"seed {seed}: hole before {record.base_offset}"
        assert record.window and record.batch.count == WINDOW_EVENTS, f"seed {seed}: torn window"
        keys = list(record.batch.key_ints)
        assert keys == list(range(keys[0], keys[0] + WINDOW_EVENTS)), f"seed {seed}: mixed window"
        assert keys[0] in recorder.sent_first_keys, f"seed {seed}: a window nobody sent"
        offset += record.batch.count
    stored = {r.base_offset: (r.batch.key_ints[0], r.batch.count) for r in records}
    for base, acked in recorder.acked.items():
        assert stored.get(base) == acked, f"seed {seed}: acknowledged window at {base} lost"


def test_sigkill_during_produce_loses_nothing_acknowledged(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    create_topic(stub(broker.address), "crash")
    recorder = AckRecorder(broker.address, first_key=0)
    total_acked = 0
    try:
        for kill in range(KILLS):
            thread = threading.Thread(target=recorder.run, daemon=True)
            thread.start()
            time.sleep(rng.uniform(0.05, 0.4))
            broker.kill()
            thread.join(30)
            assert not thread.is_alive(), f"seed {seed}: producer hung after kill {kill}"
            broker.start()
            check_log(broker.address, recorder, seed)
            total_acked = len(recorder.acked)
        assert total_acked > KILLS, f"seed {seed}: too few windows acknowledged to mean much"
    finally:
        broker.stop()
    print(f"seed {seed}: {KILLS} kills, {total_acked} acknowledged windows all kept")


def _fill(address: str, topic: str, events: int) -> None:
    client = stub(address)
    create_topic(client, topic)
    batch_events = 5_000
    requests = (pb.ProduceRequest(topic=topic, batch=int_batch(list(range(i, i + batch_events))))
                for i in range(0, events, batch_events))
    for response in client.Produce(requests, timeout=120):
        assert response.error_code == 0, response.error_message


def test_restart_time_does_not_grow_with_the_log(tmp_path: Path) -> None:
    small = BrokerProcess(tmp_path / "small", "--no-fsync")
    large = BrokerProcess(tmp_path / "large", "--no-fsync")
    for broker, events in ((small, 1_000), (large, 600_000)):
        broker.start()
        _fill(broker.address, "sized", events)
        broker.kill()
    small_s = small.start()
    small.kill()
    large_s = large.start()
    large.kill()
    small_again = small.start()
    small.stop()
    large_again = large.start()
    end = stub(large.address).DescribeTopic(pb.DescribeTopicRequest(topic="sized"))
    large.stop()
    assert end.partitions[0].end_offset == 600_000
    small_best, large_best = min(small_s, small_again), min(large_s, large_again)
    print(f"restart: small log {small_best:.3f}s, large log (600k events) {large_best:.3f}s")
    assert large_best < small_best * 1.5 + 0.25
