"""Fields a client could compute wrongly, computed or verified by the broker. Pure.

Rule: the broker trusts no derived field. The `slots` column is derived from
the ordering keys (`sdk.core.hashing`): when a batch carries it, every entry
must equal the slot the broker computes, else the request is refused with
INVALID_ARGUMENT naming the first wrong event (stored wrong slots would
break per-key order for every Key_Shared subscription and hash-range read);
when it is absent the broker fills it in. Counts are checked by
`sdk.core.columns.validate_batch`; offsets and SCNs are assigned by the
partition (`windows.py`), never taken from a client.

Runs on the event loop, once per produce request: the keys go through a
`SlotCache` (one C-level pass for known keys), not a Python loop per event.
"""

from __future__ import annotations

from broker.errors import BrokerError
from sdk.core.columns import ordering_keys_of
from sdk.core.hashing import SlotCache
from sdk.core.pb import keybus_pb2 as pb


def settle_slots(batch: pb.EventBatch, cache: SlotCache) -> None:
    """Verify the batch's slots column against its ordering keys, or fill it in.

    Raises:
        BrokerError: slots_mismatch, naming the first event whose slot is wrong.
    """
    keys = ordering_keys_of(batch)
    computed = cache.slots(keys)
    sent = batch.slots
    if not sent:
        sent.extend(computed)
        return
    if len(sent) == 1 and batch.count != 1:
        if computed.count(sent[0]) == len(computed):
            return
        wrong = next(i for i, s in enumerate(computed) if s != sent[0])
        raise _mismatch(wrong, sent[0], keys[wrong], computed[wrong])
    if sent != computed:
        wrong = next(i for i, (s, c) in enumerate(zip(sent, computed, strict=True)) if s != c)
        raise _mismatch(wrong, sent[wrong], keys[wrong], computed[wrong])


def _mismatch(index: int, sent: int, key: str | int, slot: int) -> BrokerError:
    return BrokerError("slots_mismatch", index=index, sent=sent, key=key, slot=slot)
