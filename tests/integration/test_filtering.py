"""Server-side range/mod filtering on reads, with a real broker process.

Goal: filtered events never leave the broker: a filtered read returns exactly
the passing events, the bytes on the wire shrink with it, per-source filters
from the broker config apply to every read, and a bad filter or config is
refused with a message naming the entry.
Method: produce known keys over gRPC, read with filters, compare with the
pure evaluator's answer and with the worked examples of the design.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from sdk.core.pb import keybus_pb2 as pb
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.wire import create_topic, events_of, int_batch, produce, read_all, stub


def _read_bytes(address: str, topic: str, key_filter: pb.KeyFilter | None = None) -> int:
    request = pb.ReadRequest(topic=topic, start=pb.StartPosition(earliest=True), filter=key_filter)
    return sum(r.ByteSize() for r in stub(address).Read(request, timeout=30))


def test_range_and_mod_worked_examples(shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    create_topic(client, "filtered")
    keys = [4_999_999, 5_000_000, 9_999_999, 10_000_000, 14_999_999, 15_000_000, 29_999_999,
            30_000_000, *range(0, 40)]
    produce(client, [pb.ProduceRequest(topic="filtered", batch=int_batch(keys))])
    range_filter = pb.KeyFilter(type=pb.KeyFilter.RANGE, range_size=5_000_000, range_partitions="[1,3-6]")
    got = [k for _, k, _, _ in events_of(read_all(client, "filtered", filter=range_filter))]
    assert got == [5_000_000, 9_999_999, 15_000_000, 29_999_999]
    mod_filter = pb.KeyFilter(type=pb.KeyFilter.MOD, mod_num_buckets=2, mod_buckets="[0]")
    got = [k for _, k, _, _ in events_of(read_all(client, "filtered", filter=mod_filter))]
    assert got == [k for k in keys if k % 2 == 0]


def test_filtered_read_sends_fewer_bytes(shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    create_topic(client, "filtered-bytes")
    produce(client, [pb.ProduceRequest(topic="filtered-bytes", batch=int_batch(list(range(i, i + 1000))))
                     for i in range(0, 10_000, 1000)])
    tenth = pb.KeyFilter(type=pb.KeyFilter.MOD, mod_num_buckets=10, mod_buckets="[3]")
    full = _read_bytes(shared_broker.address, "filtered-bytes")
    filtered = _read_bytes(shared_broker.address, "filtered-bytes", tenth)
    assert filtered < full * 0.2, (filtered, full)
    offsets = [o for o, k, _, _ in events_of(read_all(client, "filtered-bytes", filter=tenth))]
    assert offsets == list(range(3, 10_000, 10))  # offsets stay the log's offsets


@pytest.mark.parametrize(("key_filter", "text"), [
    (pb.KeyFilter(type=pb.KeyFilter.MOD, mod_num_buckets=0, mod_buckets="[0]"), "numBuckets"),
    (pb.KeyFilter(type=pb.KeyFilter.MOD, mod_num_buckets=4, mod_buckets="[3-9]"), "'3-9'"),
    (pb.KeyFilter(type=pb.KeyFilter.RANGE, range_size=10, range_partitions="[5-2]"), "'5-2'"),
    (pb.KeyFilter(type=pb.KeyFilter.RANGE, range_size=10, range_partitions="1,2"), "'1,2'"),
])
def test_bad_filter_is_refused(shared_broker: BrokerProcess, key_filter: pb.KeyFilter, text: str) -> None:
    client = stub(shared_broker.address)
    with pytest.raises(grpc.RpcError) as caught:
        read_all(client, "filtered", filter=key_filter)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert text in (caught.value.details() or ""), caught.value.details()


def test_config_filter_applies_per_source(tmp_path: Path) -> None:
    config = tmp_path / "keybus.toml"
    config.write_text('[serversidefilter]\n"filter(people).type" = "MOD"\n'
                      '"filter(people).mod.numBuckets" = 2\n"filter(people).mod.buckets" = "[1]"\n')
    broker = BrokerProcess(tmp_path / "data", "--config", str(config))
    broker.start()
    try:
        client = stub(broker.address)
        create_topic(client, "sources")
        people = int_batch(list(range(10)))
        people.sources.append("people")
        orders = int_batch(list(range(10)))
        orders.sources.append("orders")
        produce(client, [pb.ProduceRequest(topic="sources", batch=people),
                         pb.ProduceRequest(topic="sources", batch=orders)])
        got = [(o, k) for o, k, _, _ in events_of(read_all(client, "sources"))]
        assert got == [(1, 1), (3, 3), (5, 5), (7, 7), (9, 9)] + [(10 + k, k) for k in range(10)]
    finally:
        broker.stop()


def test_broker_refuses_to_start_on_bad_filter_config(tmp_path: Path) -> None:
    config = tmp_path / "keybus.toml"
    config.write_text('port = 0\n[serversidefilter]\n"filter(people).type" = "RANGE"\n'
                      '"filter(people).range.size" = -5\n"filter(people).range.partitions" = "[1]"\n')
    done = subprocess.run([sys.executable, "-m", "broker", "--config", str(config),
                           "--data-dir", str(tmp_path / "d")], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert done.returncode == 2
    assert "line 4" in done.stderr and "range.size" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


async def _drain_bytes(address: str, subscription: str, key_filter: str | None,
                       expected: int) -> tuple[list[int], int]:
    from sdk.consumer import Consumer

    consumer = await Consumer.subscribe(address, "filtered-subscription", subscription,
                                        key_filter=key_filter, start="earliest")
    keys: list[int] = []
    size = 0
    try:
        while len(keys) < expected:
            batch = await consumer.receive_batch(timeout_s=20)
            keys.extend(batch.keys())  # type: ignore[arg-type]
            size += batch.record.ByteSize()
            consumer.ack_batch(batch)
    finally:
        await consumer.close()
    return keys, size


def test_filtered_subscription_receives_fewer_bytes(shared_broker: BrokerProcess) -> None:
    import asyncio

    client = stub(shared_broker.address)
    create_topic(client, "filtered-subscription")
    produce(client, [pb.ProduceRequest(topic="filtered-subscription",
                                       batch=int_batch(list(range(i, i + 1000))))
                     for i in range(0, 10_000, 1000)])
    everything, full_bytes = asyncio.run(_drain_bytes(shared_broker.address, "all", None, 10_000))
    tenth, tenth_bytes = asyncio.run(_drain_bytes(shared_broker.address, "tenth", "mod:10:[3]", 1_000))
    assert sorted(everything) == list(range(10_000))
    assert tenth == list(range(3, 10_000, 10))
    assert tenth_bytes < full_bytes * 0.2, (tenth_bytes, full_bytes)
