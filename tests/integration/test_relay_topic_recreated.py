"""A chain (broker -> relay -> relay) whose upstream topic is deleted and created again.

Goal: after the topic is deleted and created again on the upstream and written
to while the middle relay is away, both relays hold the new log, record by
record, and nothing of the old one (before, the middle relay kept the old
log's offsets below the new log's end, copied the new log after them, and so
did the relay behind it: a log that exists nowhere, served for good).

Method: real broker processes on 127.0.0.1 with static `upstream` entries;
the upstream is written through the wire; logs are read back and compared.
Bounded waits only.
"""

from __future__ import annotations

from pathlib import Path

from sdk.core.pb import keybus_pb2 as pb
from tests.integration.test_relay_chaining import broker, same
from tests.support.relay_cluster import events, records, wait_for
from tests.support.wire import int_batch, produce, stub

RELAY = "relay_retry_backoff_ms = 50\nrelay_retry_backoff_max_ms = 500\n"


def write(address: str, first_key: int, records_n: int, value: bytes) -> None:
    """`records_n` records of 3 events each to t/0."""
    client = stub(address)
    for k in range(first_key, first_key + 3 * records_n, 3):
        produce(client, [pb.ProduceRequest(topic="t", partition=0,
                                           batch=int_batch([k, k + 1, k + 2], value))])


def test_relays_drop_the_old_log_of_a_topic_created_again_upstream(tmp_path: Path) -> None:
    upstream = broker(tmp_path, "upstream", "")
    middle = broker(tmp_path, "middle", f'{RELAY}[replication.t]\nupstream = "{upstream.address}"\n')
    end = broker(tmp_path, "end", f'{RELAY}[replication.t]\nupstream = "{middle.address}"\n')
    try:
        upstream.start()
        create = pb.CreateTopicRequest(topic="t", config=pb.TopicConfig(partitions=1))
        stub(upstream.address).CreateTopic(create, timeout=10)
        middle.start()
        end.start()
        write(upstream.address, 0, 20, b"old-")  # offsets 0..59
        wait_for(lambda: events(end.address, "t") == 60, 20, "the chain copied the old log")
        middle.stop()
        stub(upstream.address).DeleteTopic(pb.DeleteTopicRequest(topic="t"), timeout=10)
        stub(upstream.address).CreateTopic(create, timeout=10)
        write(upstream.address, 1000, 5, b"new-")  # offsets 0..14 of another log
        middle.start()

        def holds_the_new_log(address: str) -> bool:
            theirs, ours = records(upstream.address, "t"), records(address, "t")
            return len(ours) == len(theirs) and all(map(same, ours, theirs))

        wait_for(lambda: holds_the_new_log(middle.address), 20, "the middle relay holds the new log")
        wait_for(lambda: holds_the_new_log(end.address), 20, "the end relay holds the new log")
        assert "holds another log of this partition" in middle.log_path.read_text()
    finally:
        end.stop()
        middle.stop()
        upstream.stop()
