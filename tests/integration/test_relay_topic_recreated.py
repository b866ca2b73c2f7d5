"""A chain (broker -> relay -> relay) whose upstream topic is deleted and created again.

Goal: after the topic is deleted and created again on the upstream and written
to while the middle relay is away, both relays hold the new log, record by
record, and nothing of the old one (before, the middle relay kept the old
log's offsets below the new log's end, copied the new log after them, and so
did the relay behind it: a log that exists nowhere, served for good). And a
relay whose own retention moved its start past where the new log begins
starts its log over at 0 and copies the new log, its subscription's cursor
moved back to 0 (before, it emptied its log at its old start and refused the
new log's offset 0 for ever).

Method: real broker processes on 127.0.0.1 with static `upstream` entries;
the upstream is written through the wire; logs are read back and compared.
Bounded waits only.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sdk import Consumer
from sdk.core.pb import keybus_pb2 as pb
from tests.integration.test_relay_chaining import broker, same
from tests.integration.test_relay_retention import bootstrap
from tests.support.relay_cluster import cluster_story, events, records, wait_for
from tests.support.relay_pair import (
    EVENTS,
    RETENTION_BYTES,
    offsets,
    produce_records,
    unchanged_for,
)
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
        # the incarnations tell first (incarnation.py); records, for topics without one
        assert "holds another incarnation of the topic" in middle.log_path.read_text()
    finally:
        end.stop()
        middle.stop()
        upstream.stop()


async def first_offset(address: str, start: str = "earliest") -> int | None:
    """The offset of the first event subscription s of t delivers on `address` (None
    when none comes within 10 s); nothing is acknowledged."""
    async with await Consumer.subscribe(address, "t", "s", type="shared",
                                        start=start) as consumer:
        try:
            return (await consumer.receive(10)).offset
        except TimeoutError:
            return None


@pytest.mark.parametrize("new_records", [0, 3, 40])
def test_a_relay_whose_retention_moved_its_start_copies_a_topic_created_again(
        tmp_path: Path, new_records: int) -> None:
    """The relay's own retention moved its start (about 200) past where the upstream's
    new log begins (0): it drops the old log, starts over at 0 and copies the new
    log, whether that is empty (then written), shorter than the old start, or past
    it; its subscription goes on at 0. Before, the log was emptied at the old start
    and the new log's offset 0 was refused and retried for ever; an empty or short
    new log was logged as a tail 'never acknowledged'."""
    trimming = "retention_check_interval_ms = 50\nview_linger_ms = 200\n"
    upstream = broker(tmp_path, "upstream", trimming)
    relay = broker(tmp_path, "relay", f'{trimming}{RELAY}[replication.t]\n'
                   f'upstream = "{upstream.address}"\n')
    create = pb.CreateTopicRequest(topic="t", config=pb.TopicConfig(
        partitions=1, retention_bytes=RETENTION_BYTES))
    try:
        upstream.start()
        stub(upstream.address).CreateTopic(create, timeout=10)
        relay.start()
        produce_records(upstream.address, 0, 30)  # offsets 0..299, about 600 KB
        wait_for(lambda: offsets(relay.address)[1] == 30 * EVENTS, 30, "the relay copied")
        wait_for(lambda: offsets(relay.address)[0] >= 15 * EVENTS, 30, "the relay trimmed")
        assert asyncio.run(first_offset(relay.address, "latest")) is None  # cursor at 300
        relay.stop()
        stub(upstream.address).DeleteTopic(pb.DeleteTopicRequest(topic="t"), timeout=10)
        # created again without retention: one that trimmed the new log past this
        # relay's last record would leave the handshake nothing to compare
        stub(upstream.address).CreateTopic(pb.CreateTopicRequest(
            topic="t", config=pb.TopicConfig(partitions=1)), timeout=10)
        produce_records(upstream.address, 10_000, new_records)
        relay.start()
        if not new_records:
            wait_for(lambda: offsets(relay.address) == (0, 0), 30, "the relay started over")
            produce_records(upstream.address, 10_000, 3)

        def holds_the_new_log() -> bool:
            """The upstream's log from the relay's start (its own retention trims)."""
            theirs, ours = records(upstream.address, "t"), records(relay.address, "t")
            tail = [r for r in theirs if ours and r.base_offset >= ours[0].base_offset]
            return bool(ours) and len(ours) == len(tail) and all(map(same, ours, tail))
        try:
            wait_for(holds_the_new_log, 30, "the relay holds the new log")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{cluster_story([upstream, relay], 't')}") from None
        log = relay.log_path.read_text()
        assert "holds another incarnation of the topic" in log
        assert "never acknowledged" not in log
        # the cursor went from 300 back to 0 (this relay's retention may trim the
        # 40 records' new log past that: the subscription then goes on at its start)
        wait_for(unchanged_for(lambda: offsets(relay.address), 1.5), 30, "retention settled")
        assert asyncio.run(first_offset(relay.address)) == offsets(relay.address)[0]
        produce_records(upstream.address, 20_000, 2)
        wait_for(holds_the_new_log, 30, "the relay copies on")
        wait_for(lambda: bootstrap(relay.address) == bootstrap(upstream.address), 30,
                 "the relay's compacted view holds the new log's keys only")
    finally:
        relay.stop()
        upstream.stop()
