"""A chain whose upstream topic was deleted and created again, and trimmed so far
that no record is left to compare: the topic's incarnation tells.

Goal: relays that copied offsets 0..29 of topic t; t is deleted and created
again on the upstream, and its retention trims the new log until it starts
exactly at 30, the relays' end. Before, the middle relay's handshake found no
record of the new log at its last offset (29: removed) and, being unable to
tell, went on copying the new log at 30 after the old 0..29: one log holding
two topics, served for good (and so did the relay behind it). Now the broker
gives every topic an incarnation, a follower's copy takes its upstream's, and
a follower whose upstream's topic is another incarnation drops its copy and
copies the new log from its start: both relays hold the upstream's log record
by record and nothing of the old one, show the upstream's incarnation, and
say it once per partition.

Method: real broker processes on 127.0.0.1 with static `upstream` entries;
the upstream trims every 50 ms and keeps about ten records; records are read
back and compared. Bounded waits only.
"""

from __future__ import annotations

from pathlib import Path

from keybus.dev_cluster import BrokerRunner
from sdk.core.pb import keybus_pb2 as pb
from tests.integration.test_relay_chaining import broker, same
from tests.support.relay_cluster import cluster_story, records, wait_for
from tests.support.relay_pair import (
    EVENTS,
    RETENTION_BYTES,
    offsets,
    produce_records,
    unchanged_for,
)
from tests.support.wire import stub

RELAY = ("retention_check_interval_ms = 600000\nrelay_retry_backoff_ms = 50\n"
         "relay_retry_backoff_max_ms = 500\n")
OLD_RECORDS = 3  # offsets 0..29


def incarnation(address: str) -> str:
    info = stub(address).DescribeTopic(pb.DescribeTopicRequest(topic="t"), timeout=10)
    return str(info.incarnation)


def made_again_and_trimmed_to(address: str, create: pb.CreateTopicRequest, start: int) -> str:
    """Delete t and create it again, then write records of EVENTS events one at a
    time until retention made the new log start exactly at `start`; its
    incarnation. Retention removes whole records, mostly one per record added
    once full; when it removes two at once past `start`, the topic is made
    again and written anew (a few tries)."""
    for _ in range(5):
        stub(address).DeleteTopic(pb.DeleteTopicRequest(topic="t"), timeout=10)
        stub(address).CreateTopic(create, timeout=10)
        for n in range(40):
            produce_records(address, 10_000 + n * EVENTS, 1)
            wait_for(unchanged_for(lambda: offsets(address), 0.6), 10, "retention settled")
            if offsets(address)[0] >= start:
                break
        if offsets(address)[0] == start:
            return incarnation(address)
    raise AssertionError(f"retention never made t start at {start}: {offsets(address)}")


def holds_the_upstreams_log(upstream: BrokerRunner, relay: BrokerRunner) -> bool:
    """The relay holds the upstream's log, and before its start only records of the
    new log the relay copied before the upstream's retention removed them."""
    theirs, ours = records(upstream.address, "t"), records(relay.address, "t")
    if not theirs or not ours or ours[0].base_offset < OLD_RECORDS * EVENTS:
        return False
    tail = [r for r in ours if r.base_offset >= theirs[0].base_offset]
    return len(tail) == len(theirs) and all(map(same, tail, theirs))


def test_relays_drop_a_copy_of_another_incarnation_with_no_record_to_compare(
        tmp_path: Path) -> None:
    upstream = broker(tmp_path, "upstream", "retention_check_interval_ms = 50\nview_linger_ms = 200\n")
    middle = broker(tmp_path, "middle", f'{RELAY}[replication.t]\nupstream = "{upstream.address}"\n')
    end = broker(tmp_path, "end", f'{RELAY}[replication.t]\nupstream = "{middle.address}"\n')
    create = pb.CreateTopicRequest(topic="t", config=pb.TopicConfig(
        partitions=1, retention_bytes=RETENTION_BYTES))
    try:
        upstream.start()
        stub(upstream.address).CreateTopic(create, timeout=10)
        old = incarnation(upstream.address)
        middle.start()
        end.start()
        produce_records(upstream.address, 0, OLD_RECORDS)
        wait_for(lambda: offsets(end.address)[1] == OLD_RECORDS * EVENTS, 30,
                 "the chain copied the old log")
        assert incarnation(middle.address) == incarnation(end.address) == old
        middle.stop()
        # nothing left at offset 29, and the new log goes on at 30
        new = made_again_and_trimmed_to(upstream.address, create, OLD_RECORDS * EVENTS)
        assert new and new != old
        middle.start()
        try:
            wait_for(lambda: holds_the_upstreams_log(upstream, middle), 30,
                     "the middle relay holds the new log only")
            wait_for(lambda: holds_the_upstreams_log(upstream, end), 30,
                     "the end relay holds the new log only")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{cluster_story([upstream, middle, end], 't')}") from None
        for relay in (middle, end):  # from the new log's start (30) on, nothing older
            assert records(relay.address, "t")[0].base_offset == OLD_RECORDS * EVENTS
        assert incarnation(middle.address) == incarnation(end.address) == new
        for relay, its_upstream in ((middle, upstream), (end, middle)):
            said = [line for line in relay.log_path.read_text().splitlines()
                    if "holds another incarnation" in line]
            assert len(said) == 1, said
            assert (f"topic t/0: upstream {its_upstream.address} holds another incarnation of "
                    f"the topic ({new!r}) than the one copied here ({old!r}): it was deleted "
                    "and created again there; dropped offsets 0..29 (30 events in 3 records), "
                    "this log starts over at 0") in said[0], said[0]
        produce_records(upstream.address, 50_000, 2)  # and the copy goes on
        wait_for(lambda: holds_the_upstreams_log(upstream, end), 30, "the chain copies on")
    finally:
        end.stop()
        middle.stop()
        upstream.stop()
