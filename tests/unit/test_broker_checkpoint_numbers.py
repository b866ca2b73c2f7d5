"""A checkpoint number the broker's record cannot hold is refused in the caller's words.

Goal: `BrokerCheckpointStore.update_checkpoint` with a negative offset (or a
partition, SCN or epoch out of its field) raised protobuf's bare `ValueError:
Value out of range: -1`, naming no field; it now raises InvalidArgument naming
the field, its value and what is allowed, before any call. The processor never
sends such a number; an application using the store directly may.
Method: a store on a closed port of 127.0.0.1: the check comes before the
channel is opened, so nothing connects.
"""

from __future__ import annotations

import asyncio

import pytest

from sdk import errors
from sdk.stores.broker_stores import BrokerCheckpointStore
from sdk.stores.records import Checkpoint


@pytest.mark.parametrize("field, value, allowed", [
    ("offset", -1, "0..18446744073709551615"),
    ("scn", -5, "0..18446744073709551615"),
    ("epoch", 1 << 64, "0..18446744073709551615"),
    ("partition", 1 << 32, "0..4294967295"),
])
def test_a_number_out_of_its_field_is_named(field: str, value: int, allowed: str) -> None:
    numbers = {"partition": 0, "offset": 0, "scn": 0, "epoch": 0, field: value}
    checkpoint = Checkpoint("", "orders", "billing", **numbers)

    async def go() -> None:
        store = BrokerCheckpointStore("127.0.0.1:1")  # port 1: nothing listens
        try:
            await store.update_checkpoint(checkpoint)
        finally:
            await store.close()

    with pytest.raises(errors.InvalidArgument) as refused:
        asyncio.run(go())
    assert str(refused.value).startswith(f"checkpoint {field} {value} is invalid: allowed "
                                         f"{allowed} (partition {numbers['partition']} of "
                                         "topic 'orders', consumer group 'billing')")
