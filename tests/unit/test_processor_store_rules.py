"""The broker's event processor stores: key layout, the claim/fence/checkpoint
rules, and the single task's rounds.

Goal: keys of different groups never collide and a group is one range; a
claim is a compare-and-set whose epoch rises exactly when the owner changes
(or a fence moved past it) and never falls; a checkpoint is refused from an
older epoch (naming the owner) or an unregistered one; claims decided in
one round see each other, so two racing new claims cannot both win.
Method: direct calls; hypothesis for key round trips and claim sequences;
the task over a real RocksDB in a temp dir (no network).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.processor_stores import keys, rules
from broker.processor_stores.keys import Fence, Owned, Position
from broker.processor_stores.service import ProcessorStores
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb

WHERE = rules.Where("t", 0, "g")
names = st.text(max_size=12)


@given(st.integers(0, 2**32 - 1), names, names, st.integers(0, 2**32 - 1), names,
       st.integers(0, 2**63), st.integers(0, 2**63), st.integers(-2**63, 2**63 - 1))
def test_keys_and_values_round_trip(topic_id: int, namespace: str, group: str, partition: int,
                                    owner: str, version: int, epoch: int, modified: int) -> None:
    key = keys.ownership_key(topic_id, namespace, group, partition)
    assert key.startswith(keys.ownership_prefix(topic_id, namespace, group))
    assert keys.partition_of_key(key) == partition
    assert keys.partition_of_key(keys.checkpoint_key(topic_id, namespace, group, partition)) == partition
    owned = Owned(owner, version, epoch, modified)
    assert keys.decode_owned(keys.encode_owned(owned)) == owned
    assert keys.decode_fence(keys.encode_fence(Fence(epoch, owner))) == Fence(epoch, owner)
    assert keys.decode_position(keys.encode_position(Position(version, epoch, 3))) == \
        Position(version, epoch, 3)


def test_group_keys_do_not_collide_and_stay_under_their_topic() -> None:
    assert keys.group_key("a", "bc") != keys.group_key("ab", "c")
    assert not keys.ownership_prefix(1, "a", "b").startswith(keys.ownership_prefix(1, "a", "b-2"))
    key = keys.checkpoint_key(7, "n", "g", 3, keys.FENCE)
    assert keys.checkpoint_prefix(7, "n", "g", keys.FENCE) < key < keys.U32.pack(8)


def test_a_claim_is_a_compare_and_set() -> None:
    new = rules.decide_claim(None, None, rules.Claim(0, "a", ""), 100)
    assert new == rules.Won(Owned("a", 1, 1, 100), Fence(1, "a"))
    owned = new.owned
    assert rules.decide_claim(owned, None, rules.Claim(0, "b", ""), 101) is None
    assert rules.decide_claim(owned, None, rules.Claim(0, "b", "9"), 101) is None
    assert rules.decide_claim(None, None, rules.Claim(0, "b", "1"), 101) is None
    renewed = rules.decide_claim(owned, Fence(1, "a"), rules.Claim(0, "a", "1"), 102)
    assert renewed == rules.Won(Owned("a", 2, 1, 102), None)
    released = rules.decide_claim(renewed.owned, Fence(1, "a"), rules.Claim(0, "", "2"), 103)
    assert released == rules.Won(Owned("", 3, 1, 103), None)
    taken = rules.decide_claim(released.owned, Fence(1, "a"), rules.Claim(0, "a", "3"), 104)
    assert taken == rules.Won(Owned("a", 4, 2, 104), Fence(2, "a"))


def test_a_claim_goes_above_a_fence_registered_elsewhere() -> None:
    owned = Owned("a", 5, 3, 0)
    won = rules.decide_claim(owned, Fence(1_700_000_000_000, "z"), rules.Claim(0, "a", "5"), 1)
    assert won is not None and won.owned.epoch == 1_700_000_000_001
    assert won.fence == Fence(1_700_000_000_001, "a")


@given(st.lists(st.tuples(st.sampled_from(["", "a", "b", "c"]), st.integers(0, 12),
                          st.booleans()), max_size=40))
def test_epochs_never_fall_and_rise_exactly_on_a_new_owner(steps: list[tuple[str, int, bool]]
                                                           ) -> None:
    current: Owned | None = None
    fence: Fence | None = None
    for now, (owner, stale, use_stale) in enumerate(steps):
        etag = "" if current is None else (str(stale) if use_stale else current.etag)
        won = rules.decide_claim(current, fence, rules.Claim(0, owner, etag), now)
        matches = (current is None and etag == "") or (current is not None
                                                       and etag == current.etag)
        assert (won is not None) == matches
        if won is None:
            continue
        before = current.epoch if current else 0
        new_owner = owner != "" and owner != (current.owner_id if current else "")
        assert won.owned.epoch == (before + 1 if new_owner else before)
        assert (won.fence is not None) == new_owner
        current, fence = won.owned, won.fence or fence
        assert fence is None or fence.epoch >= current.epoch


def test_checkpoint_epochs() -> None:
    rules.check_checkpoint_epoch(None, 0, WHERE)
    rules.check_checkpoint_epoch(Fence(4, "a"), 0, WHERE)
    rules.check_checkpoint_epoch(Fence(4, "a"), 4, WHERE)
    with pytest.raises(BrokerError, match="older than epoch 4 of the current owner 'a'") as e:
        rules.check_checkpoint_epoch(Fence(4, "a"), 3, WHERE)
    assert e.value.kind.name == "checkpoint_fenced"
    with pytest.raises(BrokerError, match="never registered"):
        rules.check_checkpoint_epoch(Fence(4, "a"), 5, WHERE)
    with pytest.raises(BrokerError, match="never registered"):
        rules.check_checkpoint_epoch(None, 1, WHERE)


def test_fences_only_rise_and_an_epoch_has_one_owner() -> None:
    assert rules.decide_fence(None, 3, "a", WHERE) == Fence(3, "a")
    assert rules.decide_fence(Fence(3, "a"), 9, "b", WHERE) == Fence(9, "b")
    assert rules.decide_fence(Fence(3, "a"), 3, "a", WHERE) is None
    for epoch, owner, match in ((2, "a", "older"), (3, "b", "one owner"), (0, "a", "epoch=0")):
        with pytest.raises(BrokerError, match=match):
            rules.decide_fence(Fence(3, "a"), epoch, owner, WHERE)


def test_names_are_checked() -> None:
    rules.check_group("", "billing.v2_x-1", 255)
    rules.check_group("any ns: {x}/y", "g", 255)
    for namespace, group, field in (("", "", "consumer_group"), ("", "a b", "consumer_group"),
                                    ("x" * 256, "g", "namespace"), ("\n", "g", "namespace")):
        with pytest.raises(BrokerError, match=field):
            rules.check_group(namespace, group, 255)
    with pytest.raises(BrokerError, match="owner_id"):
        rules.check_owner_id("", 255, empty_ok=False)
    with pytest.raises(BrokerError, match="claimed twice"):
        rules.check_claims([rules.Claim(1, "a", ""), rules.Claim(1, "b", "")], 4, 255)
    with pytest.raises(BrokerError, match=r"allowed 0\.\.3"):
        rules.check_claims([rules.Claim(4, "a", "")], 4, 255)


def test_claims_in_one_round_see_each_other(tmp_path: Path) -> None:
    async def go() -> None:
        settings = Settings(data_dir=str(tmp_path), fsync=False)
        store = RocksStore(str(tmp_path / "db"), fsync=False)
        registry = TopicRegistry(store, settings)
        await registry.open()
        await registry.create("t", pb.TopicConfig(partitions=2))
        stores = ProcessorStores(store, registry, settings, clock=lambda: 42)
        stores.start()
        try:
            group = stores.group("", "t", "g")
            # Queued together, decided in one round: only the first new claim wins.
            first, second = await asyncio.gather(
                stores.claim(group, [rules.Claim(0, "a", "")]),
                stores.claim(group, [rules.Claim(0, "b", ""), rules.Claim(1, "b", "")]))
            assert first == [(0, Owned("a", 1, 1, 42))]
            assert second == [(1, Owned("b", 1, 1, 42))]
            assert stores.list_ownership(group) == first + second
            with pytest.raises(BrokerError, match="no event to checkpoint"):
                await stores.update_checkpoint(group, 0, Position(0, 1, 1))
            await stores.fence(group, 1, 7, "c")
            again = await stores.claim(group, [rules.Claim(1, "b", "1")])
            assert again == [(1, Owned("b", 2, 8, 42))]  # renewal above the fence
        finally:
            await stores.close()
            await registry.close()
            store.close()
    asyncio.run(go())
