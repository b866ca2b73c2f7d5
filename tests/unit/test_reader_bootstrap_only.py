"""A Reader's bootstrap-only options are refused on a log read, all alike.

Goal: `sources`, `slot_wait_timeout_ms` and `on_slot_wait` only mean something
to a bootstrap (start="bootstrap"); on a log read `sources` raised a ValueError
but the other two were silently ignored, so a caller who forgot
start="bootstrap" believed it had bounded a slot wait. Each is now a ValueError
naming the option and the start it needs; a bootstrap takes all three.
Method: construct Readers (no call is made before open; the address is a closed
port on 127.0.0.1).
"""

from __future__ import annotations

from typing import Any

import pytest

from sdk import Reader

OPTIONS: list[dict[str, Any]] = [
    {"sources": ["billing"]},
    {"slot_wait_timeout_ms": 1_000},
    {"slot_wait_timeout_ms": 0},
    {"on_slot_wait": lambda waiting, message: None},
]


IDS = ["sources", "slot_wait_timeout_ms", "slot_wait_timeout_ms=0", "on_slot_wait"]


@pytest.mark.parametrize("option", OPTIONS, ids=IDS)
@pytest.mark.parametrize("start", ["earliest", "latest", 3])
def test_a_log_read_refuses_a_bootstrap_only_option(option: dict[str, Any], start: Any) -> None:
    name = next(iter(option))
    with pytest.raises(ValueError, match=rf"^{name} applies to start='bootstrap' only \("):
        Reader("127.0.0.1:1", "t", 0, start=start, **option)


@pytest.mark.parametrize("option", OPTIONS, ids=IDS)
def test_a_bootstrap_takes_them(option: dict[str, Any]) -> None:
    reader = Reader("127.0.0.1:1", "t", 0, start="bootstrap", **option)
    assert reader.reconnects == 0
