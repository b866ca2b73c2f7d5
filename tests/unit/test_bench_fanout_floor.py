"""Goal: the grpcio fan-out floor (benchmarks/fanout_floor.py) routes a producer batch as a
broker routes keys to 4 Key_Shared consumers: every event to exactly one consumer, each key
always to the same one, with the batch's value intact.

Method: batches with known keys through `encode_batch`, `route` and `decode_delivery`.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.fanout_floor import decode_delivery, encode_batch, route


def test_a_batch_is_split_by_key_and_keeps_its_value() -> None:
    value = b"\x00\x00\x00\x00\x00\x00\x00\x07" + b"x" * 92
    messages = route(encode_batch([0, 1, 4, 5, 8, 2], value), 4)
    assert {i: len(decode_delivery(m)) for i, m in messages.items()} == {0: 3, 1: 2, 2: 1}
    assert all(v == value for m in messages.values() for v in decode_delivery(m))
    assert 3 not in messages  # no event for it: no message


@given(st.lists(st.integers(0, 2**62), max_size=50), st.integers(1, 8))
def test_every_event_goes_to_exactly_one_subscriber(keys: list[int], subscribers: int) -> None:
    messages = route(encode_batch(keys, b"v"), subscribers)
    assert sum(len(decode_delivery(m)) for m in messages.values()) == len(keys)
    for index, message in messages.items():
        assert len(decode_delivery(message)) == sum(k % subscribers == index for k in keys)
