"""ConsumerConfig: the Key_Shared mode is sent only when named; a bad setting or
start is refused at once, naming it and what is allowed."""

from __future__ import annotations

import pytest

from sdk.consumer_config import ConsumerConfig
from sdk.core.pb import keybus_pb2 as pb


def test_no_mode_leaves_the_field_unset_so_the_broker_decides() -> None:
    request = ConsumerConfig(type="key_shared").open_request("t", "s", "c")
    assert not request.HasField("key_shared_mode")


@pytest.mark.parametrize(("mode", "value"), [("auto_split", pb.AUTO_SPLIT),
                                             ("consistent", pb.CONSISTENT)])
def test_a_named_mode_is_sent_even_when_it_is_the_wire_default(mode: str, value: int) -> None:
    request = ConsumerConfig(type="key_shared", mode=mode).open_request("t", "s", "c")
    assert request.HasField("key_shared_mode") and request.key_shared_mode == value


def test_bad_modes_and_misplaced_ranges_say_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="mode 'split' is invalid; allowed: auto_split, "
                                         "sticky, consistent or None"):
        ConsumerConfig(type="key_shared", mode="split").open_request("t", "s", "c")
    with pytest.raises(ValueError, match="only for type='key_shared' with mode='sticky' "
                                         r"\(here type='key_shared', mode=None\)"):
        ConsumerConfig(type="key_shared", ranges="0-10").open_request("t", "s", "c")


@pytest.mark.parametrize(("setting", "value", "allowed"), [
    ("ack_flush_ms", -1, "an int >= 0"),
    ("receiver_queue_size", "10", "an int >= 2"),
    ("receiver_queue_size", 1, "an int >= 2"),
    ("receiver_queue_total_max", 1.5, "an int >= 2"),
    ("nack_delay_ms", True, "an int >= 0"),
    ("ack_timeout_ms", 1 << 32, r"an int 0\.\.4294967295"),
    ("retry_backoff_ms", 0, "an int >= 1"),
])
def test_a_bad_int_setting_is_named_at_construction(setting: str, value: object, allowed: str
                                                     ) -> None:
    with pytest.raises(ValueError, match=f"{setting}={value!r} is invalid: need {allowed}"):
        ConsumerConfig(**{setting: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(("start", "shown"), [(-1, "-1"), (1 << 64, str(1 << 64)),
                                              ({"scn": 1 << 64}, "{'scn': 18446744073709551616}"),
                                              ("bootstrap", "'bootstrap'")])
def test_a_bad_start_is_named_with_what_a_consumer_takes(start: object, shown: str) -> None:
    with pytest.raises(ValueError) as refused:
        ConsumerConfig(start=start).open_request("t", "s", "c")  # type: ignore[arg-type]
    message = str(refused.value)
    assert message.startswith(f"start {shown} is invalid: use 'earliest', 'latest', an offset "
                              "0..2**64-1, or {'scn': n} with n 0..2**64-1")
    assert "'bootstrap'" not in message.split("use", 1)[1]  # a consumer cannot bootstrap


def test_the_largest_offset_and_scn_are_taken() -> None:
    assert ConsumerConfig(start=(1 << 64) - 1).open_request("t", "s", "c") \
        .initial_position.offset == (1 << 64) - 1
    assert ConsumerConfig(start={"scn": (1 << 64) - 1}).open_request("t", "s", "c") \
        .initial_position.scn == (1 << 64) - 1


@pytest.mark.parametrize("partitions", [[-1], ["0"], 0, [1 << 32], "01"])
def test_bad_partitions_are_named_with_what_is_allowed(partitions: object) -> None:
    """Protobuf's own words named neither ("Value out of range: -1")."""
    with pytest.raises(ValueError, match=r"partitions=.* is invalid: .*ints? 0\.\.4294967295"):
        ConsumerConfig(partitions=partitions)  # type: ignore[arg-type]
