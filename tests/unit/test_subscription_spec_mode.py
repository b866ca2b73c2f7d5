"""SubscriptionSpec.of_open: which Key_Shared mode an open asks for, old clients included."""

from __future__ import annotations

from broker.subscription.spec import SubscriptionSpec, mode_named
from sdk.core.pb import keybus_pb2 as pb


def test_an_unnamed_mode_asks_for_the_brokers_default() -> None:
    request = pb.SubscribeOpen(topic="t", subscription="s", type=pb.KEY_SHARED)
    assert not mode_named(request)
    assert SubscriptionSpec.of_open(request, 0, pb.CONSISTENT).mode == pb.CONSISTENT


def test_a_named_zero_value_is_auto_split() -> None:
    request = pb.SubscribeOpen(topic="t", subscription="s", type=pb.KEY_SHARED,
                               key_shared_mode=pb.AUTO_SPLIT)
    assert SubscriptionSpec.of_open(request, 0, pb.CONSISTENT).mode == pb.AUTO_SPLIT


def test_an_old_clients_auto_split_is_not_on_the_wire_so_it_reads_as_unnamed() -> None:
    # what a client built before the field was `optional` sends for AUTO_SPLIT: the
    # zero value left out (topic "t", subscription "s", type KEY_SHARED = 3)
    old_bytes = b"\n\x01t\x12\x01s\x20\x03"
    request = pb.SubscribeOpen.FromString(old_bytes)
    assert request.type == pb.KEY_SHARED and not mode_named(request)
    assert SubscriptionSpec.of_open(request, 0, pb.CONSISTENT).mode == pb.CONSISTENT


def test_other_types_carry_no_mode() -> None:
    request = pb.SubscribeOpen(topic="t", subscription="s", type=pb.SHARED,
                               key_shared_mode=pb.CONSISTENT)
    assert SubscriptionSpec.of_open(request, 0, pb.CONSISTENT).mode == pb.AUTO_SPLIT
