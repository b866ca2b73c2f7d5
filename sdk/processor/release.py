"""Giving back a stopping processor's partitions, bounded.

On stop a processor releases its records (owner ""), so the group's other
processors take them on their next cycle instead of after the expiration.
The release waits for the ownership store at most STOP_STORE_WAIT_S: a store
that does not answer (a frozen Redis holds each call for its socket timeout)
must not hold a shutdown; the claims then expire, and one WARNING (or
on_error) says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace

from sdk import errors
from sdk.processor.outages import Line
from sdk.processor.pump import Callbacks
from sdk.stores.protocols import OwnershipStore
from sdk.stores.records import PartitionOwnership

# stop() waits at most this long for the ownership store, twice: for a cycle under way
# (then cancels it) and for the release. A store that does not answer (a frozen Redis
# waits out its socket timeout) must not hold a shutdown; the claims then expire.
STOP_STORE_WAIT_S = 2.0


async def release(ownership: OwnershipStore, held: Mapping[int, PartitionOwnership],
                  where: str, expiration_ms: int, callbacks: Callbacks) -> None:
    """Give back `held` (owner ""): others take it at once. A failure or a store
    silent for STOP_STORE_WAIT_S goes to on_error, else one WARNING.

    Args:
        where: "event processor topic/group", for the message.
    """
    if not held:
        return
    releases = [replace(record, owner_id="") for record in held.values()]
    topic = releases[0].topic
    try:
        async with asyncio.timeout(STOP_STORE_WAIT_S):
            await ownership.claim_ownership(releases)
    except Exception as e:
        if isinstance(e, TimeoutError):
            e = TimeoutError(f"the ownership store did not answer within "
                             f"{STOP_STORE_WAIT_S:g} s")
        elif isinstance(e, errors.KeybusError):  # it held claims: the topic was there
            e = errors.deleted_if_gone(e, topic)
        message = (f"{where}: stopped without releasing partitions "
                   f"{sorted(r.partition for r in releases)} ({e}); other processors take "
                   f"them once the claims expire (ownership_expiration_ms={expiration_ms})")
        await callbacks.error(None, e, Line(logging.WARNING, message))
