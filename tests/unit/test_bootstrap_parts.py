"""Bootstrap's small parts: wire bytes, positions, markers, selectors, settings, Spark options.

Goal: the hand-built BootstrapResponse parses with the generated class; a
BootstrapPosition survives proto and JSON round trips; a reconnect does not
repeat a phase marker and positions advance record by record; the sources
selector and the view settings follow their rules; Spark's snapshot option
and offsets mark behave; bootstrap_streams_max refuses past its limit and a
slot given back twice (caught up, then ended) counts once.
Method: direct calls on small inputs.
"""

from __future__ import annotations

import dataclasses

import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.partition import TopicMeta
from broker.rpc.bootstrap_servicer import StreamSlots
from broker.view.bootstrap import position_of, response, resume_of, source_selector
from broker.view.config import check_view_config, describe_view_config
from broker.view.snapshot import Position
from sdk.bootstrap import BootstrapPosition, items_of
from sdk.core.pb import keybus_pb2 as pb
from spark_connector.options import OptionError, Use, parse_read_options
from spark_connector.snapshot import mark_snapshot, split_snapshot_mark


def _record(base: int, keys: list[int], source: str = "s") -> pb.Record:
    return pb.Record(base_offset=base, batch=pb.EventBatch(
        count=len(keys), key_ints=keys, values=[b""] * len(keys), sources=[source]))


def test_response_bytes_parse_as_bootstrap_response() -> None:
    record = _record(3, [1, 2]).SerializeToString()
    marker = pb.BootstrapMarker(phase=pb.CATCHUP, snapshot_offset=9, target_offset=12)
    resume = pb.BootstrapResume(phase=pb.CATCHUP, next_offset=10, target_offset=12)
    parsed = pb.BootstrapResponse.FromString(response([record], 10, 15, pb.CATCHUP, resume, marker))
    assert parsed.records[0].batch.key_ints == [1, 2]
    assert (parsed.next_offset, parsed.end_offset, parsed.phase) == (10, 15, pb.CATCHUP)
    assert parsed.marker == marker and parsed.resume == resume
    plain = pb.BootstrapResponse.FromString(response([], 0, 0, pb.SNAPSHOT, resume))
    assert not plain.HasField("marker") and plain.phase == pb.SNAPSHOT


@pytest.mark.parametrize("position", [
    BootstrapPosition(), BootstrapPosition("snapshot", 40, "orders", -7),
    BootstrapPosition("snapshot", 40, "", "k-1"), BootstrapPosition("snapshot", 40, "orders"),
    BootstrapPosition("catchup", 40, None, None, 45, 60), BootstrapPosition("online", 40, None, None, 70, 60),
])
def test_position_round_trips(position: BootstrapPosition) -> None:
    assert BootstrapPosition.from_proto(position.to_proto()) == position
    assert BootstrapPosition.from_dict(position.to_dict()) == position
    if position.phase == "snapshot":
        broker_side = position_of(position.to_proto())
        assert broker_side == Position(position.source, position.key)
        assert resume_of(broker_side, position.snapshot_offset) == position.to_proto()


def test_bad_position_dict_is_refused() -> None:
    with pytest.raises(ValueError, match="phase 'later' is invalid"):
        BootstrapPosition.from_dict({"phase": "later", "snapshot_offset": 1})
    with pytest.raises(ValueError, match="invalid"):
        BootstrapPosition.from_dict({"phase": "snapshot"})


def test_items_skip_announced_markers_and_advance_per_record() -> None:
    announced: set[str] = set()
    message = pb.BootstrapResponse(
        records=[_record(5, [1, 4], "a"), _record(2, [9], "b")], phase=pb.SNAPSHOT,
        marker=pb.BootstrapMarker(phase=pb.SNAPSHOT, snapshot_offset=20),
        resume=BootstrapPosition("snapshot", 20, "b", 12).to_proto())
    items = items_of(message, announced, BootstrapPosition())
    assert [i.marker is not None for i in items] == [True, False, False]
    assert items[1].position == BootstrapPosition("snapshot", 20, "a", 4)
    assert items[2].position == BootstrapPosition("snapshot", 20, "b", 12)  # the message's resume
    again = items_of(message, announced, items[-1].position)  # a resumed stream repeats the marker
    assert all(i.marker is None for i in again)
    log = pb.BootstrapResponse(records=[_record(20, [1, 2, 3])], phase=pb.CATCHUP,
                               resume=BootstrapPosition("catchup", 20, None, None, 23, 30).to_proto())
    before = BootstrapPosition("catchup", 20, None, None, 20, 30)
    assert items_of(log, announced, before)[0].position.next_offset == 23


def test_source_selector_keeps_listed_sources_then_the_inner_filter() -> None:
    batch = pb.EventBatch(count=4, key_ints=[1, 2, 3, 4], values=[b""] * 4,
                          sources=["a", "b", "a", "c"])
    assert source_selector(frozenset({"a", "c"}), None)(batch) == [0, 2, 3]
    assert source_selector(frozenset({"a", "c"}), lambda b: [1, 2, 3])(batch) == [2, 3]
    broadcast = pb.EventBatch(count=2, key_ints=[1, 2], values=[b""] * 2, sources=["b"])
    assert source_selector(frozenset({"a"}), None)(broadcast) == []
    assert source_selector(frozenset({""}), None)(pb.EventBatch(count=1, key_ints=[1],
                                                                 values=[b""])) == [0]


def test_view_settings() -> None:
    meta = TopicMeta("t", 0, 1, 0, 0, 0)
    on = Settings(view_default=True)
    off = Settings(view_default=False)
    assert check_view_config(meta, pb.TopicConfig(), on).view
    assert not check_view_config(meta, pb.TopicConfig(), off).view
    assert check_view_config(meta, pb.TopicConfig(view=pb.VIEW_ON), off).view
    assert check_view_config(meta, pb.TopicConfig(compacted=True), off).view  # compaction needs it
    with pytest.raises(BrokerError, match="needs the compacted view"):
        check_view_config(meta, pb.TopicConfig(compacted=True, view=pb.VIEW_OFF), on)
    with pytest.raises(BrokerError, match=r"delete_retention_ms=-5 is invalid; allowed 0 \(the "
                                          r"broker's default, 86,400,000 ms\) or a positive"):
        check_view_config(meta, pb.TopicConfig(delete_retention_ms=-5), on)  # 0 is not "no limit"
    config = pb.TopicConfig()
    describe_view_config(dataclasses.replace(meta, view=True), config, on)
    assert (config.view, config.delete_retention_ms) == (pb.VIEW_ON, on.delete_retention_ms)


def test_spark_snapshot_option_and_offsets_mark() -> None:
    options = {"broker": "127.0.0.1:1", "topic": "t", "startingOffsets": "Snapshot"}
    assert parse_read_options(options, Use.BATCH_READ).snapshot
    assert parse_read_options(options, Use.STREAM_READ).snapshot
    assert not parse_read_options({**options, "startingOffsets": "earliest"}, Use.BATCH_READ).snapshot
    for extra in ({"endingOffsets": "latest"}, {"pushdown": "guarded"}):
        with pytest.raises(OptionError, match="does not apply with startingOffsets=snapshot"):
            parse_read_options({**options, **extra}, Use.BATCH_READ)
    marked = mark_snapshot({"t": {"0": 7}})
    assert split_snapshot_mark(marked) == ({"t": {"0": 7}}, True)
    assert split_snapshot_mark({"t": {"0": 7}}) == ({"t": {"0": 7}}, False)


def test_stream_slots_refuse_past_the_limit_and_release_once() -> None:
    slots = StreamSlots(2)
    first, second = slots.take(), slots.take()
    with pytest.raises(BrokerError, match="2 Bootstrap streams in their snapshot or catch-up"):
        slots.take()
    first()  # caught up: the slot goes back
    first()  # the stream ends later: nothing more goes back
    assert slots.held == 1
    slots.take()
    with pytest.raises(BrokerError):
        slots.take()
    second()
    assert slots.held == 1
