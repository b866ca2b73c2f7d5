"""Topics stored before brokers set incarnations get one when loaded.

Goal: a topic whose stored metadata has no incarnation (a store written by an
older broker) gets one when the broker loads it, kept across restarts, so
checkpoints written from then on carry it and a later delete-and-create is
told (test_processor_topic_recreated.py). On a relay follower, the one it
made up is no judgement: it takes its upstream's (which made up its own) and
drops nothing of its copy, even when no record can be compared.
Method: real broker processes; the older store is made by removing the
incarnation from the topic's stored metadata while the broker is stopped.
"""

from __future__ import annotations

from pathlib import Path

from broker.log.rocks_store import RocksStore
from sdk.core.pb import keybus_pb2 as pb
from tests.integration.test_relay_chaining import broker
from tests.support.broker_process import BrokerProcess
from tests.support.relay_cluster import records, wait_for
from tests.support.relay_pair import offsets, produce_records
from tests.support.wire import int_batch, produce, stub


def incarnation(address: str, topic: str) -> str:
    info = stub(address).DescribeTopic(pb.DescribeTopicRequest(topic=topic), timeout=10)
    return str(info.incarnation)


def as_stored_by_an_older_broker(data_dir: Path) -> None:
    """Remove every topic's incarnation from its stored metadata (the broker is stopped)."""
    store = RocksStore(str(data_dir / "log.rocksdb"), fsync=False)
    try:
        for topic in store.load_topics():
            assert topic.pop("incarnation")
            topic.pop("incarnation_backfilled")
            store.save_topic(topic)
    finally:
        store.close()


def test_a_topic_stored_without_incarnation_gets_one_kept_across_restarts(
        tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data")
    process.start()
    try:
        client = stub(process.address)
        client.CreateTopic(pb.CreateTopicRequest(topic="old", config=pb.TopicConfig(
            partitions=1)), timeout=10)
        produce(client, [pb.ProduceRequest(topic="old", batch=int_batch([1, 2, 3]))])
        first = incarnation(process.address, "old")
        process.stop()
        as_stored_by_an_older_broker(process.data_dir)
        process.start()
        backfilled = incarnation(process.address, "old")
        assert backfilled and backfilled != first
        process.stop()
        process.start()
        assert incarnation(process.address, "old") == backfilled  # stored, not made anew
        assert "topic old: stored without an incarnation; it is incarnation " \
               f"{backfilled!r} now" in process.log_path.read_text()
    finally:
        process.stop()


def test_a_follower_takes_its_upstreams_over_one_it_made_up_and_drops_nothing(
        tmp_path: Path) -> None:
    """The copy's setup compares no record: only `incarnation_backfilled` tells that
    the follower's incarnation was made up, not copied from another topic."""
    upstream = broker(tmp_path, "upstream", "retention_check_interval_ms = 50\n"
                      "view_linger_ms = 200\n")
    relay = broker(tmp_path, "relay", "retention_check_interval_ms = 600000\n"
                   "relay_retry_backoff_ms = 50\nrelay_retry_backoff_max_ms = 500\n"
                   f'[replication.t]\nupstream = "{upstream.address}"\n')
    try:
        upstream.start()
        stub(upstream.address).CreateTopic(pb.CreateTopicRequest(topic="t", config=pb.TopicConfig(
            partitions=1)), timeout=10)
        relay.start()
        produce_records(upstream.address, 0, 3)
        wait_for(lambda: offsets(relay.address)[1] == 30, 30, "the relay copied")
        copied = records(relay.address, "t")
        relay.stop()
        upstream.stop()
        as_stored_by_an_older_broker(upstream.data_dir)
        as_stored_by_an_older_broker(relay.data_dir)
        upstream.start()
        relay.start()
        wait_for(lambda: incarnation(relay.address, "t") == incarnation(upstream.address, "t"),
                 30, "the relay took the upstream's incarnation")
        produce_records(upstream.address, 100, 1)
        wait_for(lambda: offsets(relay.address)[1] == 40, 30, "the relay copies on")
        assert records(relay.address, "t")[:3] == copied  # nothing dropped
        assert "another incarnation" not in relay.log_path.read_text()
    finally:
        relay.stop()
        upstream.stop()
