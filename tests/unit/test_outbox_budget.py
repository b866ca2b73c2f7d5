"""One memory budget for every consumer's outbox (`share_budget.py`, `consumer_state.py`).

Goal: what all Subscribe streams of a broker hold queued stays within one
budget however many consumers stall. Each session pauses past its share: the
budget in equal parts, at most `consumer_outbox_bytes_max`, at least a floor.
Nothing queued is dropped: a session over a smaller share pauses at once and
stays paused until written down to half its share; when a session leaves, the
paused ones now under half their larger share resume (nothing else would wake
them); a message larger than the share still goes, alone, and the outbox
drains and resumes (it never wedges).

Method: the budget with stand-in members; real `Session`s with a recording
pause callback in place of a dispatcher; a real subscription manager on a real
RocksDB store (consumers attached, detached, their subscription deleted).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from broker.config import Settings
from broker.log.rocks_store import RocksStore
from broker.subscription.consumer_state import ConsumerSpec, Session
from broker.subscription.outbox_budget import OutboxBudget
from broker.subscription.share_budget import ShareBudget
from sdk.core.pb import keybus_pb2 as pb
from tests.support.managers import subscription_manager


@dataclass(eq=False)
class Held:
    bytes: int = 0


def session(budget: OutboxBudget, name: str, pauses: list[tuple[str, bool]],
            bytes_max: int = 100) -> Session:
    spec = ConsumerSpec(name, 0, (), 0, 0, (0,))
    s = Session(spec, "t", "s", outbox_max=100, outbox_bytes_max=bytes_max, budget=budget)
    s.on_pause(0, lambda paused: pauses.append((name, paused)))
    budget.join_all([(s, s.share_changed)])
    return s


def write(s: Session, n: int) -> None:
    """The servicer hands a message of `n` bytes to gRPC, which writes it."""
    s.writing(b"x" * n)
    s.written(b"x" * n)


def test_the_share_is_equal_within_the_member_bound_and_above_the_floor() -> None:
    budget = ShareBudget(bytes_max=100, member_bytes_max=40, floor=20)
    members = [Held() for _ in range(6)]
    shares = []
    for member in members:
        budget.join_all([(member, lambda: None)])
        shares.append(budget.share)
    assert shares == [40, 40, 33, 25, 20, 20]  # 100 // 5 = 20, 100 // 6 = 16 < the floor
    for member in members[:4]:
        budget.leave(member)
    assert budget.share == 40 and len(budget) == 2


def test_a_leave_wakes_only_the_members_waiting_for_room() -> None:
    budget = ShareBudget(bytes_max=100, member_bytes_max=100)
    woken: list[str] = []
    a, b, c = Held(60), Held(60), Held()
    for name, member in (("a", a), ("b", b), ("c", c)):
        budget.join_all([(member, lambda name=name: woken.append(name))])  # type: ignore[misc]
    assert woken == ["a", "b", "a", "b"]  # each join woke those above the new share
    woken.clear()
    budget.wait_for_room(a)
    budget.leave(c)
    assert woken == ["a"]
    budget.done_waiting(a)
    budget.leave(b)
    assert woken == ["a"]  # nobody waits any more


def test_a_session_pauses_past_its_share_and_resumes_under_half_of_it() -> None:
    budget = OutboxBudget(bytes_max=100, member_bytes_max=100)
    pauses: list[tuple[str, bool]] = []
    first = session(budget, "a", pauses)
    session(budget, "b", pauses)  # shares of 50
    first.send(b"x" * 40)
    assert not first.paused
    first.send(b"x" * 20)  # 60 > 50
    assert pauses == [("a", True)]
    write(first, 20)  # 40 > 25: still paused
    assert first.paused
    write(first, 40)
    assert pauses == [("a", True), ("a", False)]


def test_a_new_session_pauses_those_over_the_smaller_share_at_once() -> None:
    budget = OutboxBudget(bytes_max=100, member_bytes_max=100)
    pauses: list[tuple[str, bool]] = []
    first = session(budget, "a", pauses)
    first.send(b"x" * 60)
    assert not first.paused  # 60 <= 100
    session(budget, "b", pauses)  # share 50: a holds more
    assert pauses == [("a", True)] and first.bytes == 60  # paused, nothing dropped
    write(first, 30)  # 30 > 25: waits for its new half
    assert first.paused


def test_a_closing_session_wakes_a_paused_one_under_half_its_larger_share() -> None:
    budget = OutboxBudget(bytes_max=100, member_bytes_max=100)
    pauses: list[tuple[str, bool]] = []
    first = session(budget, "a", pauses)
    second = session(budget, "b", pauses)
    first.send(b"x" * 40)
    first.send(b"x" * 30)  # 70 > 50: paused
    write(first, 40)  # 30 > 25: still paused, and no write will come
    assert first.paused
    budget.leave(second)  # share 100: 30 <= 50
    assert pauses == [("a", True), ("a", False)] and not first.paused
    third = session(budget, "c", pauses)
    third.send(b"x" * 10)
    budget.leave(third)  # nobody waits: nobody is woken
    assert pauses == [("a", True), ("a", False)]


def test_a_message_larger_than_the_share_goes_and_the_outbox_drains() -> None:
    budget = OutboxBudget(bytes_max=30, member_bytes_max=100, floor=10)
    pauses: list[tuple[str, bool]] = []
    sessions = [session(budget, name, pauses) for name in "abcd"]  # share: the floor, 10
    big = sessions[0]
    big.send(b"x" * 50)  # an empty outbox takes it, then pauses
    assert big.paused and big.bytes == 50
    write(big, 50)
    assert not big.paused
    assert pauses == [("a", True), ("a", False)]


def test_sessions_pause_once_all_outboxes_hold_the_budget() -> None:
    """A session that filled under a larger share keeps it; a later one does not get a
    share on top of it past the budget (streams that stall one by one)."""
    budget = OutboxBudget(bytes_max=100, member_bytes_max=100)
    pauses: list[tuple[str, bool]] = []
    first = session(budget, "a", pauses)
    first.send(b"x" * 90)  # alone: its share is 100
    second = session(budget, "b", pauses)  # shares of 50: a pauses, keeps its 90
    second.send(b"x" * 40)  # 40 <= 50, but 130 held in all
    assert pauses == [("a", True), ("b", True)] and budget.held() == 130
    write(second, 40)  # its own write resumes it (nothing waits on the others)
    assert pauses[-1] == ("b", False)
    first.leave_budget()
    assert budget.held() == 0 == second.bytes and first.budget is None


def test_a_message_being_written_counts_twice_until_written() -> None:
    """gRPC copies a message it writes; the servicer's bytes live until the write ends."""
    budget = OutboxBudget(bytes_max=100, member_bytes_max=100)
    pauses: list[tuple[str, bool]] = []
    first = session(budget, "a", pauses)
    first.send(b"x" * 40)
    first.writing(b"x" * 40)
    assert first.bytes == 80 == budget.held()
    first.send(b"x" * 30)  # 110 > 100 with gRPC's copy
    assert pauses == [("a", True)]
    first.written(b"x" * 40)  # 30 <= 50
    assert pauses == [("a", True), ("a", False)] and budget.held() == 30


def test_a_closed_session_is_not_woken_into_pausing() -> None:
    budget = OutboxBudget(bytes_max=100, member_bytes_max=100)
    pauses: list[tuple[str, bool]] = []
    first = session(budget, "a", pauses)
    first.send(b"x" * 60)
    first.close()
    session(budget, "b", pauses)
    assert pauses == []


def test_the_manager_shares_one_budget_among_every_open_stream(tmp_path: Path) -> None:
    settings = Settings(consumer_outbox_broker_bytes_max=12 << 20,
                        consumer_outbox_bytes_max=8 << 20, event_bytes_max=1 << 20)

    async def body() -> None:
        store = RocksStore(str(tmp_path), fsync=False)
        async with subscription_manager(store, settings) as (_, manager):
            budget = manager.outbox_budget
            sessions = [await manager.attach(pb.SubscribeOpen(
                topic="t", subscription=name, consumer_name="c", type=pb.SHARED))
                for name in ("a", "b", "c")]
            assert (len(budget), budget.share) == (3, 4 << 20)
            assert [s.limit() for s in sessions] == [4 << 20] * 3
            manager.detach(sessions[0])
            assert (len(budget), budget.share) == (2, 6 << 20)
            await manager.delete("t", "b", force=True)  # its stream ends with it
            assert (len(budget), budget.share) == (1, 8 << 20)  # the stream's own bound
            await manager.attach(pb.SubscribeOpen(topic="t", subscription="a", consumer_name="c",
                                                  type=pb.SHARED))
            assert [s.limit() for s in sessions[2:]] == [6 << 20]
        assert len(budget) == 0  # closing the manager ended every stream
        store.close()

    asyncio.run(body())


def test_joins_at_the_floor_look_at_no_other_member() -> None:
    """Past bytes_max / floor members the share stays at the floor: a join wakes nobody
    and reads nobody's bytes, so opening N streams costs O(N), not O(N²)."""

    class Counted:
        reads = 0

        @property
        def bytes(self) -> int:
            Counted.reads += 1
            return 0

    budget = ShareBudget(bytes_max=100, member_bytes_max=100, floor=10)
    for _ in range(10):  # 100 // 10 = 10: the floor from here on
        budget.join_all([(Counted(), lambda: None)])
    assert budget.share == 10
    Counted.reads = 0
    for _ in range(1_000):
        budget.join_all([(Counted(), lambda: None)])
    assert Counted.reads == 0 and budget.share == 10
