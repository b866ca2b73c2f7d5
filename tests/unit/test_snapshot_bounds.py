"""A Bootstrap snapshot message stays within bytes_max with long keys and sources.

Goal: every SNAPSHOT message fits the read's `bytes_max` (4 MiB by default:
gRPC's default receive limit of any client), whatever the length of the
keys and source names it carries, so a client built from the proto with
default settings never meets a message it cannot take. Before, the chunker
reserved a fixed 4,114 bytes for the message's fields, but each message also
names its resume point (the last key looked at and its source), up to
~128 KiB with a key and a source of ~64 KiB: a full chunk of 60 KiB keys went
~56 KiB past bytes_max (a default client then failed with RESOURCE_EXHAUSTED
on that message at every retry). Only a message with a single entry may go
past it (an entry larger than bytes_max alone goes out, so the snapshot moves on).
Method: a real RocksDB store and view in a temp dir, folded from records of
string keys near 64 KiB, under source names of up to 65,535 bytes (the
longest a producer may send), and of int keys; read in chunks at budgets
around a few entries' size; each chunk framed as the servicer frames it
(broker/view/bootstrap.py, with the first message's marker and incarnation
and the largest offsets), parsed with the generated class, and measured.
Also: the byte arithmetic of snapshot_bytes.py against protobuf's own sizes
at the extremes (longest varints, mixed key columns, every optional column).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log import codec as log_codec
from broker.log.rocks_store import Append, RocksStore
from broker.rpc import wire
from broker.topics import new_incarnation
from broker.view import codec
from broker.view.bootstrap import INCARNATION_TAG, resume_of
from broker.view.bootstrap import response as bootstrap_response
from broker.view.snapshot import Position, SnapshotCursor, SnapshotSpec
from broker.view.snapshot_bytes import (
    ENTRY_COLUMNS_BYTES_MAX,
    RESPONSE_FIELDS_BYTES_MAX,
    record_fields_bytes_max,
    resume_bytes_max,
)
from broker.view.store import ViewStore
from sdk.core.columns import TEXT_BYTES_MAX
from sdk.core.pb import keybus_pb2 as pb

FAR = 2**63  # the largest offsets: the longest varints
KEY_CHARS = 60_000
TOPIC = "t" * 249  # the longest topic name by default (topic_name_bytes_max)


def _key(n: int) -> str:
    return f"{n:04d}" + "k" * (KEY_CHARS - 4)


# (source names, keys of each source): long keys under a short and under the longest
# source; int keys under the longest source; long keys under two sources, so a chunk
# holds a record of each and its resume point names the second.
CASES = {
    "long keys": (["s"], [_key(n) for n in range(12)]),
    "long keys, longest source": (["s" * TEXT_BYTES_MAX], [_key(n) for n in range(12)]),
    "int keys, longest source": (["s" * TEXT_BYTES_MAX], list(range(-6, 6))),
    "long keys, two long sources": (["a" * 60_000, "b" * 60_000], [_key(n) for n in range(6)]),
}


@pytest.fixture(params=list(CASES))
def view(request: pytest.FixtureRequest,
         tmp_path: Path) -> Iterator[tuple[ViewStore, list[tuple[str, int | str]]]]:
    sources, keys = CASES[request.param]
    store = RocksStore(str(tmp_path / "db"), fsync=False)
    appends, base = [], 0
    for source in sources:
        for key in keys:  # one event a record, so the view's keys come from many records
            batch = pb.EventBatch(count=1, values=[b"v" * 100], sources=[source])
            if isinstance(key, str):
                batch.key_strings.append(key)
            else:
                batch.key_ints.append(key)
            body = pb.Record(topic=TOPIC, partition=0, base_offset=base, scn_first=base + 1,
                             publish_time_ms=1, batch=batch).SerializeToString()
            appends.append(Append(base, base + 1, 1, False,
                                  log_codec.encode_record(body, 1, 1, base + 1, False)))
            base += 1
    store.append(1, 0, appends, {}, 0, 0)
    views = ViewStore(store)
    views.fold_pass(1, 0, base, 10_000)
    yield views, [(s, k) for s in sorted(sources) for k in sorted(keys, key=codec.key_part)]
    store.close()


def test_every_snapshot_message_stays_within_bytes_max(
        view: tuple[ViewStore, list[tuple[str, int | str]]]) -> None:
    views, expected = view
    head = wire.incarnation_field(new_incarnation(), INCARNATION_TAG)  # the first message's
    for budget in range(100_000, 700_000, 37_000):
        cursor = SnapshotCursor(views, SnapshotSpec(TOPIC, 1, 0, (), None, None, False, 10_000,
                                                    budget), Position(), None)
        seen: list[tuple[str, int | str]] = []
        for _ in range(len(expected) + 1):
            chunk = cursor.next_chunk()
            records = [r.SerializeToString() for r in chunk.records]
            marker = pb.BootstrapMarker(phase=pb.SNAPSHOT, snapshot_offset=FAR, snapshot_scn=FAR,
                                        target_offset=FAR, consistent_offset=FAR,
                                        keys_missing_below=FAR)
            message = head + bootstrap_response(records, FAR, FAR, pb.SNAPSHOT,
                                                resume_of(chunk.position, FAR), marker)
            parsed = pb.BootstrapResponse.FromString(message)
            assert parsed.resume.source == chunk.position.source
            assert len(message) <= budget or chunk.events <= 1, (budget, len(message),
                                                                  chunk.events)
            seen += [(r.batch.sources[0], k) for r in parsed.records
                     for k in (r.batch.key_strings or r.batch.key_ints)]
            if chunk.done:
                break
        cursor.close()
        assert seen == expected, budget


def test_a_chunk_is_not_cut_far_below_bytes_max(
        view: tuple[ViewStore, list[tuple[str, int | str]]]) -> None:
    """The arithmetic counts a source name once per record, not once per entry: a
    full chunk leaves less than one entry, its resume point and a little slack of
    bytes_max unused (counted per entry, a 64 KiB source left over half of it)."""
    views, expected = view
    budget = 500_000
    cursor = SnapshotCursor(views, SnapshotSpec(TOPIC, 1, 0, (), None, None, False, 10_000,
                                                budget), Position(), None)
    chunk = cursor.next_chunk()
    cursor.close()
    records = len(wire.read_response([r.SerializeToString() for r in chunk.records], 0, 0))
    longest_key = max(len(codec.key_part(k)) for _, k in expected)
    longest_source = max(len(s.encode()) for s, _ in expected)
    assert chunk.done or budget - records < 2 * longest_key + longest_source + 3_000, records


@pytest.mark.parametrize("key", [-FAR, FAR - 1, "k", "k" * 70_000, "é" * 300])
@pytest.mark.parametrize("source", ["", "s", "s" * TEXT_BYTES_MAX, "ü" * 20_000])
def test_resume_bytes_max_bounds_the_resume_field(key: int | str, source: str) -> None:
    resume = resume_of(Position(source, key), FAR)
    resume.next_offset = resume.target_offset = FAR
    message = bootstrap_response([], 0, 0, pb.SNAPSHOT, resume)
    assert len(message) <= resume_bytes_max(len(source.encode()), len(codec.key_part(key)))


@pytest.mark.parametrize("source", ["", "s" * TEXT_BYTES_MAX])
def test_record_and_entry_bytes_bound_a_full_record(source: str) -> None:
    """Every column present, the longest varints, both key columns (mixed keys):
    a Record takes at most its fields plus each entry's columns, key and stored value."""
    keys: list[int | str] = [-FAR, "kk" * 100, -1, "é" * 3]
    values = [b"v" * 300, b"", b"w" * 20_000, b"x"]
    ordering, schema = "o" * 200, "schema" * 10
    headers = pb.Headers(entries={"h": b"x" * 30})
    batch = pb.EventBatch(count=len(keys), sources=[source], values=values,
                          key_strings=[k if isinstance(k, str) else "" for k in keys],
                          key_ints=[k if isinstance(k, int) else 0 for k in keys],
                          slots=[65535] * 4, opcodes=[pb.DELETE] * 4,
                          event_times_ms=[-1] * 4, ordering_keys=[ordering] * 4,
                          schemas=[schema] * 4, headers=[headers] * 4)
    record = pb.Record(topic=TOPIC, partition=2**32 - 1, base_offset=FAR, scn_first=FAR,
                       window=True, publish_time_ms=-1, batch=batch, offsets=[FAR] * 4,
                       scns=[FAR] * 4, publish_times_ms=[-1] * 4)
    framed = len(wire.read_response([record.SerializeToString()], 0, 0))
    stored = [codec.ENTRY_HEAD.size + len(ordering) + len(schema) + headers.ByteSize() + len(v)
              for v in values]
    bound = record_fields_bytes_max(len(TOPIC), len(source.encode())) + sum(
        len(codec.key_part(k)) + s - codec.ENTRY_HEAD.size + ENTRY_COLUMNS_BYTES_MAX
        for k, s in zip(keys, stored, strict=True))
    assert framed <= bound


def test_response_fields_bytes_max_bounds_the_other_fields() -> None:
    marker = pb.BootstrapMarker(phase=pb.SNAPSHOT, snapshot_offset=FAR, snapshot_scn=FAR,
                                target_offset=FAR, consistent_offset=FAR, keys_missing_below=FAR)
    head = wire.incarnation_field(new_incarnation(), INCARNATION_TAG)
    message = head + bootstrap_response([], FAR, FAR, pb.SNAPSHOT, pb.BootstrapResume(), marker)
    assert len(message) - 2 <= RESPONSE_FIELDS_BYTES_MAX  # less the empty resume's 2 bytes
