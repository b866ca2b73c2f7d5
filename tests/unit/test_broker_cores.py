"""Pure broker cores: record codec, retention plan, SCN/idempotence rules,
hand-built read responses, settings.

Goal: the rules in each module's docstring hold, including the edges.
Method: direct calls with small inputs; hypothesis for the codec and retention.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.config import POSITIVE_SETTINGS, ConfigError, Settings, load_settings
from broker.errors import BrokerError
from broker.log import codec
from broker.log.retention import HeadRecord, plan_trim
from broker.produce_records import same_events
from broker.rpc import wire
from broker.topics import topic_retention
from broker.windows import PartitionClock, ProduceInput, ProducerTable, advance, decide
from sdk.core.columns import SCN_MAX
from sdk.core.pb import keybus_pb2 as pb


@given(st.binary(max_size=200), st.integers(0, 2**62), st.integers(1, 2**31), st.integers(0, 2**63),
       st.booleans())
def test_record_value_round_trip(body: bytes, publish: int, count: int, scn: int, window: bool) -> None:
    value = codec.encode_record(body, publish, count, scn, window)
    header = codec.decode_header(value)
    assert (header.publish_time_ms, header.count, header.scn_first, header.window) == (
        publish, count, scn, window)
    assert codec.record_bytes(value) == body


def test_corrupt_record_is_detected() -> None:
    value = bytearray(codec.encode_record(b"hello", 1, 1, 1, False))
    value[-1] ^= 0xFF
    with pytest.raises(codec.CorruptRecord):
        codec.record_bytes(bytes(value))


def test_log_keys_sort_by_topic_partition_offset() -> None:
    keys = [codec.log_key(t, p, o) for t, p, o in [(1, 0, 5), (1, 0, 300), (1, 1, 0), (2, 0, 0)]]
    assert keys == sorted(keys)


def _records(n: int, size: int = 100, start_ms: int = 0) -> list[HeadRecord]:
    return [HeadRecord(i * 10, 10, i * 10 + 1, start_ms + i, size) for i in range(n)]


def test_retention_by_size_keeps_the_newest_record() -> None:
    plan = plan_trim(_records(5), now_ms=0, retention_ms=0, retention_bytes=250, partition_bytes=500)
    assert plan is not None and plan.records_removed == 3 and plan.stop_offset == 30
    everything = plan_trim(_records(5), now_ms=0, retention_ms=0, retention_bytes=1, partition_bytes=500)
    assert everything is not None and everything.records_removed == 4  # the newest stays


def test_retention_by_age() -> None:
    plan = plan_trim(_records(5, start_ms=1000), now_ms=1102, retention_ms=100, retention_bytes=0,
                     partition_bytes=500)
    assert plan is not None and plan.stop_offset == 30  # records published at 1000..1002 expired
    assert plan_trim(_records(5), now_ms=10, retention_ms=0, retention_bytes=0, partition_bytes=500) is None


def _input(**fields: int) -> ProduceInput:
    base = dict(topic="t", partition=0, count=3, window=False, scn=0, producer_id=0, sequence=0)
    base.update(fields)
    return ProduceInput(**base)  # type: ignore[arg-type]


def test_scn_rules() -> None:
    clock, producers = PartitionClock(0, 0), ProducerTable(4)
    plain = decide(_input(), clock, producers, 1)
    advance(clock, plain.result)
    assert (plain.result.scn_first, clock.last_scn, clock.next_offset) == (1, 3, 3)
    window = decide(_input(scn=10), clock, producers, 1)
    assert window.result.window and window.result.scn_first == 10
    advance(clock, window.result)
    assert clock.last_scn == 10
    with pytest.raises(BrokerError, match="not greater than the last SCN 10"):
        decide(_input(scn=10), clock, producers, 1)


def test_scns_never_pass_the_wire_s_uint64() -> None:
    """A partition whose last SCN leaves no room refuses with a message, storing nothing
    (before: the SCNs of a plain batch went past 2**64-1 and the partition failed forever)."""
    clock, producers = PartitionClock(0, SCN_MAX - 2), ProducerTable(4)
    with pytest.raises(BrokerError, match="no SCNs left for 3 more event"):
        decide(_input(), clock, producers, 1)
    fits = decide(_input(count=2), clock, producers, 1)
    advance(clock, fits.result)
    assert clock.last_scn == SCN_MAX
    with pytest.raises(BrokerError, match="no SCNs left for 1 more event"):
        decide(_input(count=1), clock, producers, 1)


def test_idempotence_rules() -> None:
    clock, producers = PartitionClock(0, 0), ProducerTable(2)
    for sequence in range(3):
        decision = decide(_input(producer_id=7, sequence=sequence), clock, producers, 1)
        assert not decision.duplicate
        advance(clock, decision.result)
        producers.commit(7, decision.result)
    again = decide(_input(producer_id=7, sequence=2), clock, producers, 1)
    assert again.duplicate and again.result.base_offset == 6
    with pytest.raises(BrokerError, match="expected sequence 3"):
        decide(_input(producer_id=7, sequence=5), clock, producers, 1)
    with pytest.raises(BrokerError, match="older than the 2 results"):
        decide(_input(producer_id=7, sequence=0), clock, producers, 1)
    with pytest.raises(BrokerError, match="unknown"):
        decide(_input(producer_id=8, sequence=4), clock, producers, 1)


@given(st.lists(st.binary(max_size=300), max_size=5), st.integers(0, 2**64 - 1),
       st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_hand_built_read_response_parses(records: list[bytes], next_offset: int, end: int,
                                         high_watermark: int) -> None:
    built = [pb.Record(topic="t", base_offset=i, batch=pb.EventBatch(count=1, values=[v])).SerializeToString()
             for i, v in enumerate(records)]
    parsed = pb.ReadResponse.FromString(wire.read_response(built, next_offset, end,
                                                           high_watermark))
    assert [r.SerializeToString() for r in parsed.records] == built
    assert (parsed.next_offset, parsed.end_offset, parsed.high_watermark) == \
        (next_offset, end, high_watermark)


def test_settings_precedence_and_errors(tmp_path: Path) -> None:
    config = tmp_path / "keybus.toml"
    config.write_text('port = 7000\nfsync = false\n[serversidefilter]\n"filter(people).type" = "MOD"\n'
                      '"filter(people).mod.numBuckets" = 2\n"filter(people).mod.buckets" = "[0]"\n')
    settings = load_settings(str(config), env={"KEYBUS_PORT": "7100"}, overrides={"port": "7200"})
    assert settings.port == 7200 and settings.fsync is False
    assert settings.serversidefilter["serversidefilter.filter(people).type"] == "MOD"
    assert load_settings(str(config), env={"KEYBUS_PORT": "7100"}).port == 7100
    config.write_text("prot = 1\n")
    with pytest.raises(ConfigError, match="unknown key 'prot'"):
        load_settings(str(config), env={})
    with pytest.raises(ConfigError, match="read_events_max=0 must be > 0"):
        load_settings(None, env={"KEYBUS_READ_EVENTS_MAX": "0"})
    with pytest.raises(ConfigError, match="not a valid bool"):
        load_settings(None, env={"KEYBUS_FSYNC": "maybe"})
    assert load_settings(None, env={}).key_shared_default_mode == "consistent"
    with pytest.raises(ConfigError, match="key_shared_default_mode='sticky' is invalid; "
                                          "allowed: consistent, auto_split"):
        load_settings(None, env={"KEYBUS_KEY_SHARED_DEFAULT_MODE": "sticky"})


def test_a_setting_where_zero_means_nothing_says_so_for_negatives_too() -> None:
    """partitions_max=-1 said "allowed: an integer >= 0", and 0 was refused too."""
    int_settings = {f.name for f in dataclasses.fields(Settings) if f.type == "int"}
    assert POSITIVE_SETTINGS.issubset(int_settings)
    for name in sorted(POSITIVE_SETTINGS):
        for value in (0, -1):
            with pytest.raises(ConfigError, match=rf"^{name}={value} must be > 0; allowed: an "
                                                  r"integer >= 1$"):
                Settings(**{name: value})
    for name in sorted(int_settings - POSITIVE_SETTINGS - {"port", "metrics_port"}):
        Settings(**{name: 0})  # 0 has a meaning here (its help says which)
        with pytest.raises(ConfigError, match=rf"^{name}=-1 is negative; allowed: an integer >= 0"):
            Settings(**{name: -1})
    with pytest.raises(ConfigError, match="retention_check_interval_ms=0 must be > 0"):
        load_settings(None, env={"KEYBUS_RETENTION_CHECK_INTERVAL_MS": "0"})  # a busy loop


def test_bad_filter_config_names_the_line(tmp_path: Path) -> None:
    config = tmp_path / "keybus.toml"
    config.write_text('[serversidefilter]\n"filter(people).type" = "MOD"\n'
                      '"filter(people).mod.numBuckets" = 2\n"filter(people).mod.buckets" = "[0-5]"\n')
    with pytest.raises(ConfigError, match=r"keybus.toml line 4: .*mod.buckets"):
        load_settings(str(config), env={})


def test_producer_table_evicts_least_recently_used_from_memory_only() -> None:
    producers = ProducerTable(results_kept=2, producer_ids_max=2)
    result = codec.ProducerResult(0, 0, 1, 1, False, 1)
    producers.commit(1, result)
    producers.commit(2, result)
    assert producers.known(1)  # 1 is now the most recently used
    producers.commit(3, result)
    assert list(producers.results) == [1, 3]


def test_varint_matches_protobuf_at_every_width_boundary() -> None:
    for value in (0, 1, 127, 128, 300, 16_383, 16_384, 2**21 - 1, 2**21, 2**35, 2**63,
                  2**64 - 1):
        assert wire.NEXT_OFFSET_TAG + wire.varint(value) == \
            pb.ReadResponse(next_offset=value).SerializeToString() or value == 0
    assert wire.varint(0) == b"\x00"


@pytest.mark.parametrize(("asked", "default", "stored"), [
    (0, 0, 0), (0, 3_600_000, 3_600_000), (5_000, 3_600_000, 5_000), (-1, 3_600_000, 0),
    (-1, 0, 0)])
def test_a_topic_s_retention_is_its_own_the_broker_s_default_or_none(
        asked: int, default: int, stored: int) -> None:
    """0 takes the broker's default, -1 none: before, a topic could not be kept forever
    on a broker whose default expires events (0 took the default, -1 was refused), though
    the proto said 0 kept forever."""

    assert topic_retention("retention_ms", asked, default) == stored
    with pytest.raises(BrokerError, match=r"retention_bytes=-2 is invalid; allowed -1 \(no size "
                                          r"limit\), 0 \(the broker's default: none\)"):
        topic_retention("retention_bytes", -2, 0)


def test_a_duplicate_matches_its_stored_record_only_with_the_same_events() -> None:
    """What tells a retry (the very request again) from another producer that
    numbered other events with the same id and sequence; a compacted (sparse)
    record cannot tell, so the duplicate is taken as a retry."""
    sent = pb.EventBatch(count=2, key_ints=[1, 2], values=[b"a", b"b"])
    stored = pb.Record(base_offset=5)
    stored.batch.CopyFrom(sent)
    assert same_events(stored, sent) is True
    assert same_events(stored, pb.EventBatch(count=2, key_ints=[1, 2], values=[b"a", b"c"])) \
        is False
    assert same_events(stored, pb.EventBatch(count=2, key_strings=["1", "2"],
                                             values=[b"a", b"b"])) is False
    stored.offsets.append(6)
    assert same_events(stored, sent) is None
