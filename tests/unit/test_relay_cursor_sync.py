"""Cursor sync plan: a follower mirrors its upstream's subscriptions, never past what it holds.

Method: worked examples of `plan_sync` (pure) for a missing subscription, a
moved cursor, a cursor the follower cannot reach yet, and subscriptions it
must leave alone (local consumers, another type).
"""

from __future__ import annotations

from broker.relay.cursor_sync import open_of, plan_sync
from sdk.core.pb import keybus_pb2 as pb


def info(name: str, marks: list[int], kind: int = pb.KEY_SHARED,
         consumers: int = 0) -> pb.SubscriptionInfo:
    result = pb.SubscriptionInfo(topic="t", subscription=name, type=kind)  # type: ignore[arg-type]
    for index, mark in enumerate(marks):
        partition = result.partitions.add(partition=index, mark_delete=mark)
        for c in range(consumers):
            partition.consumers.add(name=f"c{c}")
    return result


def test_a_missing_subscription_is_created_and_its_cursors_set() -> None:
    plan = plan_sync([info("s", [5, 9])], [], {0: 100, 1: 100})
    assert [i.subscription for i in plan.create] == ["s"]
    assert plan.seeks == [("s", 0, 5), ("s", 1, 9)]


def test_cursors_follow_the_upstream_but_never_past_the_local_end() -> None:
    plan = plan_sync([info("s", [50, 9])], [info("s", [40, 9])], {0: 45, 1: 100})
    assert plan.create == [] and plan.seeks == [("s", 0, 45)]


def test_local_consumers_and_other_types_are_left_alone() -> None:
    plan = plan_sync([info("s", [50]), info("x", [3], pb.SHARED)],
                     [info("s", [1], consumers=1), info("x", [1], pb.EXCLUSIVE)], {0: 100})
    assert plan.seeks == [] and plan.skipped == ["s", "x"]


def test_open_of_copies_the_settings() -> None:
    source = info("s", [0])
    source.key_shared_mode = pb.STICKY
    source.filter.CopyFrom(pb.KeyFilter(type=pb.KeyFilter.MOD, mod_num_buckets=4, mod_buckets="[0]"))
    request = open_of(source)
    assert (request.type, request.key_shared_mode, request.filter.mod_num_buckets) == (
        pb.KEY_SHARED, pb.STICKY, 4)
    assert request.initial_position.earliest
