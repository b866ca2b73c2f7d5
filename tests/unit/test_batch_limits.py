"""What the compacted view and the SCNs can hold, refused at the door: an opcode
protobuf kept though the enum lacks it, and ordering keys, sources and schemas over
TEXT_BYTES_MAX. Each was stored before and then stopped the partition's view (hence
its retention) for good. Also a reader's sources given as one string, and create_topic's numbers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdk.admin import Admin
from sdk.core.columns import TEXT_BYTES_MAX, BatchError, validate_batch
from sdk.core.pb import keybus_pb2 as pb
from sdk.event_batches import window_request
from sdk.event_checks import check_ordering_key, event_columns, extras_of
from sdk.reader import Reader


def _batch(**columns: object) -> pb.EventBatch:
    return pb.EventBatch(count=2, key_ints=[1, 2], values=[b"a", b"b"], **columns)


@pytest.mark.parametrize("opcodes", [[7], [0, 300], [2, 0]])
def test_an_opcode_outside_the_enum_is_refused(opcodes: list[int]) -> None:
    with pytest.raises(BatchError, match=r"batch.opcodes: entry \d is \d+; allowed UPSERT"):
        validate_batch(_batch(opcodes=opcodes), 1 << 20, 1000)


def test_known_opcodes_pass() -> None:
    validate_batch(_batch(opcodes=[pb.UPSERT, pb.DELETE]), 1 << 20, 1000)


@pytest.mark.parametrize("name", ["ordering_keys", "sources", "schemas"])
def test_text_over_the_view_s_limit_is_refused(name: str) -> None:
    at_limit = "x" * TEXT_BYTES_MAX
    validate_batch(_batch(**{name: [at_limit, "y"]}), 1 << 20, 1000)
    with pytest.raises(BatchError, match=r"of event 1 is 65,536 bytes \(UTF-8\), over the limit"):
        validate_batch(_batch(**{name: ["y", at_limit + "x"]}), 1 << 20, 1000)
    with pytest.raises(BatchError, match=r"of every event \(broadcast\) is"):
        validate_batch(_batch(**{name: [at_limit + "x"]}), 1 << 20, 1000)


def test_text_is_measured_in_utf8_bytes() -> None:
    wide = "é" * (TEXT_BYTES_MAX // 2 + 1)  # under the limit in characters, over in bytes
    with pytest.raises(BatchError, match="65,536 bytes"):
        validate_batch(_batch(sources=[wide]), 1 << 20, 1000)


def test_the_sdk_refuses_the_same_before_sending() -> None:
    big = "s" * (TEXT_BYTES_MAX + 1)
    with pytest.raises(ValueError, match="source is 65,536 bytes"):
        extras_of(None, big, 0, "", None, 0)
    with pytest.raises(ValueError, match="schema is 65,536 bytes"):
        extras_of(None, "", 0, big, None, 0)
    with pytest.raises(ValueError, match="ordering_key is 65,536 bytes"):
        check_ordering_key(big)
    with pytest.raises(ValueError, match=r"sources\[1\] is 65,536 bytes"):
        event_columns(2, sources=["a", big])
    assert extras_of(None, "s" * TEXT_BYTES_MAX, 0, "", None, 0)["sources"]


@pytest.mark.parametrize("scn", [1 << 63, (1 << 64) - 1])
def test_the_sdk_refuses_a_window_scn_over_int64(scn: int) -> None:
    with pytest.raises(ValueError, match=r"an SCN is an int in 1\.\.9223372036854775807"):
        window_request("t", 1, [{"key": 1, "value": b"v"}], 0, scn, 100, 1 << 20)


@pytest.mark.parametrize("sources", ["orders", "ab"])
def test_a_reader_refuses_sources_given_as_one_string(sources: str) -> None:
    """`list("ab")` was read as the sources 'a' and 'b' (or refused by the broker as
    "'r' named more than once" for "orders"); now refused before any call."""
    with pytest.raises(ValueError, match=f"sources='{sources}' is a string; give a list"):
        Reader("127.0.0.1:1", "t", 0, start="bootstrap", sources=sources)
    Reader("127.0.0.1:1", "t", 0, start="bootstrap", sources=[sources])  # no call yet


@pytest.mark.parametrize(("arguments", "said"), [
    ({"partitions": 1 << 40}, "partitions=1099511627776 is invalid: need an int 0..4294967295"),
    ({"retention_ms": 1 << 63}, "retention_ms=9223372036854775808 is invalid: need an int -1.."),
    ({"retention_bytes": -2}, "retention_bytes=-2 is invalid: need an int -1.."),
    ({"delete_retention_ms": "1"}, "delete_retention_ms='1' is invalid: need an int 0..")])
def test_create_topic_names_a_number_the_wire_cannot_carry(arguments: dict[str, Any],
                                                           said: str) -> None:
    """protobuf's own 'Value out of range: ...' named no argument; refused before any call
    (the broker address is a closed port)."""
    async def create() -> None:
        async with Admin("127.0.0.1:1") as admin:
            await admin.create_topic("t", **arguments)

    with pytest.raises(ValueError) as raised:
        asyncio.run(create())
    assert str(raised.value).startswith(said), raised.value
