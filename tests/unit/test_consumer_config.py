"""ConsumerConfig.open_request: the Key_Shared mode is sent only when named."""

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
