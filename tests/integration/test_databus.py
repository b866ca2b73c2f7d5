"""The Databus callback consumer against a real broker: the seed's rules, end to end.

Goal: what the issue's "Must show" asks of one process: the seed's sample
distribution (a group of 3, a single consumer and a group of 2 on one
window of 4 events), source order, barriers with deliberately slow members,
rollback and replay after an ERROR on the 3rd event, the server-side filter,
and the stops (retries exhausted, FATAL, a window over the byte limit, a
call over its time budget).
Method: one broker process for the module (a topic per test); windows
produced with the SDK; consumers record their calls (with monotonic times
where barriers are checked); the test waits on conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from sdk import Admin, Producer
from sdk.core.hashing import slot_of
from sdk.databus import (
    ERROR,
    FATAL,
    SUCCESS,
    ConsumerFatal,
    DatabusClient,
    DatabusConfig,
    DatabusConsumerBase,
    DbusEvent,
    Scn,
    WindowRetriesExhausted,
    WindowTooLarge,
)
from sdk.databus.window import owner_table
from tests.support.broker_process import BrokerProcess

Log = list[tuple[str, str, Any]]


class Recording(DatabusConsumerBase):
    """Records (member, call, argument); applies events to a dict at on_end_window."""

    def __init__(self, name: str, log: Log, fail: Callable[[str, Any], Any] | None = None) -> None:
        self.name = name
        self.log = log
        self.fail = fail
        self.staged: dict[Any, bytes] = {}
        self.state: dict[Any, bytes] = {}

    def _record(self, call: str, arg: Any) -> Any:
        self.log.append((self.name, call, arg))
        return self.fail(call, arg) if self.fail is not None else SUCCESS

    def on_start_consumption(self) -> Any:
        return self._record("start_consumption", None)

    def on_start_window(self, scn: Scn) -> Any:
        self.staged = {}
        return self._record("start_window", int(scn))

    def on_start_source(self, source: str, schema: str) -> Any:
        return self._record("start_source", source)

    def on_event(self, event: DbusEvent) -> Any:
        self.staged[event.key] = event.value
        return self._record("event", (event.source, event.key))

    def on_end_source(self, source: str) -> Any:
        return self._record("end_source", source)

    def on_end_window(self, scn: Scn) -> Any:
        self.state.update(self.staged)
        return self._record("end_window", int(scn))

    def on_rollback(self, scn: Scn) -> Any:
        self.staged = {}
        return self._record("rollback", int(scn))

    def on_checkpoint(self, scn: Scn) -> Any:
        return self._record("checkpoint", int(scn))

    def on_error(self, error: Exception) -> Any:
        return self._record("error", error)

    def on_stop_consumption(self) -> Any:
        return self._record("stop_consumption", None)


async def make_topic(broker: BrokerProcess, topic: str, partitions: int = 1) -> None:
    async with Admin(broker.address) as admin:
        await admin.create_topic(topic, partitions=partitions)


async def produce_windows(broker: BrokerProcess, topic: str,
                          windows: Sequence[Sequence[tuple[Any, str]]],
                          partition: int = 0) -> list[int]:
    """Each window: (key, source) pairs; values are b"<key>@<window index>". Returns SCNs."""
    scns = []
    async with await Producer.create(broker.address, topic) as producer:
        for i, window in enumerate(windows):
            result = await producer.send_window(
                [{"key": k, "value": b"%s@%d" % (str(k).encode(), i), "source": s}
                 for k, s in window], partition=partition)
            scns.append(result.scn)
    return scns


async def until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.02)


def calls(log: Log, member: str) -> list[tuple[str, Any]]:
    return [(call, arg) for name, call, arg in log if name == member]


def keys_for_members(members: int, wanted: Sequence[int]) -> list[int]:
    """Integer keys whose slots fall to the given members of an n-member group."""
    owners = owner_table(members)
    keys, candidate = [], 1
    for member in wanted:
        while owners[slot_of(candidate)] != member or candidate in keys:
            candidate += 1
        keys.append(candidate)
    return keys


def seed_notation(member_calls: list[tuple[str, Any]]) -> str:
    names = {"start_window": "StartDataEventSequence", "start_source": "StartSource",
             "event": "DataEvent", "end_source": "EndSource",
             "end_window": "EndDataEventSequence"}
    parts = []
    for call, arg in member_calls:
        if call in names:
            shown = f"{arg[0]}.{arg[1]}" if call == "event" else arg
            parts.append(f"{names[call]}({shown})")
    return " --> ".join(parts)


def test_the_seeds_sample_distribution(shared_broker: BrokerProcess) -> None:
    """3-member group, single consumer, 2-member group; one window, one source, 4 events."""
    keys = keys_for_members(3, [0, 1, 2, 0])

    async def go() -> Log:
        await make_topic(shared_broker, "sample")
        (scn,) = await produce_windows(shared_broker, "sample", [[(k, "source1") for k in keys]])
        log: Log = []
        client = DatabusClient(shared_broker.address)
        client.register([Recording(f"g3.{i}", log) for i in range(3)], topic="sample",
                        sources=["source1"], name="g3")
        client.register(Recording("single", log), topic="sample", sources=["source1"],
                        name="single")
        client.register([Recording(f"g2.{i}", log) for i in range(2)], topic="sample",
                        sources=["source1"], name="g2")
        async with client:
            await until(lambda: sum(call == "checkpoint" for _, call, _ in log) == 6)
        assert scn == 1
        return log

    log = asyncio.run(go())
    boundary = ["start_consumption", "start_window", "start_source", "end_source", "end_window",
                "checkpoint", "stop_consumption"]
    print()
    for group, size in (("g3", 3), ("single", 1), ("g2", 2)):
        members = [group] if size == 1 else [f"{group}.{i}" for i in range(size)]
        seen = []
        for member in members:
            member_calls = calls(log, member)
            print(f"{member:>7}: {seed_notation(member_calls)}")
            assert [c for c, _ in member_calls if c != "event"] == boundary  # every boundary
            events = [arg for c, arg in member_calls if c == "event"]
            first, last = member_calls.index(("start_source", "source1")), \
                member_calls.index(("end_source", "source1"))
            assert all(first < member_calls.index(("event", e)) < last for e in events)
            seen += [key for _, key in events]
        assert sorted(seen) == sorted(keys)  # each event exactly once per registration
    g3_shares = [len([1 for c, _ in calls(log, f"g3.{i}") if c == "event"]) for i in range(3)]
    assert g3_shares == [2, 1, 1]  # the keys were chosen for members 0, 1, 2, 0


def test_sources_in_the_registered_order(shared_broker: BrokerProcess) -> None:
    async def go() -> Log:
        await make_topic(shared_broker, "order")
        await produce_windows(shared_broker, "order",
                              [[(1, "B"), (2, "A"), (3, "B"), (4, "A"), (5, "C")]])
        log: Log = []
        client = DatabusClient(shared_broker.address)
        client.register(Recording("c", log), topic="order", sources=["A", "B"], name="c")
        async with client:
            await until(lambda: any(call == "end_window" for _, call, _ in log))
        return log

    log = asyncio.run(go())
    assert calls(log, "c")[1:11] == [
        ("start_window", 1), ("start_source", "A"), ("event", ("A", 2)), ("event", ("A", 4)),
        ("end_source", "A"), ("start_source", "B"), ("event", ("B", 1)), ("event", ("B", 3)),
        ("end_source", "B"), ("end_window", 1)]


class Timed(DatabusConsumerBase):
    """Async callbacks that sleep a while and record (member, call, arg, began, ended).
    Member 2's on_start_source is slow on purpose (50 ms)."""

    def __init__(self, member: int, spans: list[tuple[int, str, Any, float, float]],
                 rng: random.Random) -> None:
        self.member = member
        self.spans = spans
        self.rng = rng

    async def _timed(self, call: str, arg: Any = None) -> Any:
        began = time.monotonic()
        slow = call == "on_start_source" and self.member == 2
        await asyncio.sleep(0.05 if slow else self.rng.uniform(0, 0.004) * (1 + self.member))
        self.spans.append((self.member, call, arg, began, time.monotonic()))
        return SUCCESS

    async def on_start_window(self, scn: Scn) -> Any:
        return await self._timed("on_start_window", int(scn))

    async def on_start_source(self, source: str, schema: str) -> Any:
        return await self._timed("on_start_source", source)

    async def on_event(self, event: DbusEvent) -> Any:
        return await self._timed("on_event", event.key)

    async def on_end_source(self, source: str) -> Any:
        return await self._timed("on_end_source", source)

    async def on_end_window(self, scn: Scn) -> Any:
        return await self._timed("on_end_window", int(scn))

    async def on_checkpoint(self, scn: Scn) -> Any:
        return await self._timed("on_checkpoint", int(scn))


BARRIER_BEFORE = {"on_start_window", "on_end_window", "on_checkpoint", "on_end_source",
                  "on_start_source"}
BARRIER_AFTER = {"on_start_window", "on_end_window", "on_checkpoint", "on_end_source"}


def test_barriers_hold_with_slow_members(shared_broker: BrokerProcess) -> None:
    """The seed's barriers, checked on every boundary call of 3 windows x 2 sources:
    barrier before X: no member begins X before every member ended all it did before X;
    barrier after X: no member begins its next call before every member ended X.
    on_start_source has no barrier after: a member runs on into its events while a slow
    member is still in on_start_source."""
    rng = random.Random(7)
    spans: list[tuple[int, str, Any, float, float]] = []
    keys = keys_for_members(3, [0, 1, 2, 0, 1, 2])

    async def go() -> None:
        await make_topic(shared_broker, "barriers")
        windows = [[(k, source) for k in keys for source in "AB"] for _ in range(3)]
        await produce_windows(shared_broker, "barriers", windows)
        client = DatabusClient(shared_broker.address)
        client.register([Timed(m, spans, rng) for m in range(3)], topic="barriers",
                        sources=["A", "B"], name="timed")
        async with client:
            await until(lambda: sum(s[1] == "on_checkpoint" for s in spans) == 9)

    asyncio.run(go())
    sequences = [sorted((s for s in spans if s[0] == m), key=lambda s: s[3]) for m in range(3)]
    boundaries = [[s for s in seq if s[1] != "on_event"] for seq in sequences]
    assert [[s[1:3] for s in b] for b in boundaries].count(
        [s[1:3] for s in boundaries[0]]) == 3  # every member: the same boundary calls
    checked = 0
    for j, (_, call, arg, _, _) in enumerate(boundaries[0]):
        instance = [boundaries[m][j] for m in range(3)]
        if call in BARRIER_BEFORE:
            done_before = max((seq[seq.index(instance[m]) - 1][4]
                               for m, seq in enumerate(sequences) if seq.index(instance[m])),
                              default=0.0)
            assert all(x[3] >= done_before for x in instance), f"barrier before {call} {arg}"
            checked += 1
        if call in BARRIER_AFTER:
            ended = max(x[4] for x in instance)
            for m, seq in enumerate(sequences):
                position = seq.index(instance[m])
                if position + 1 < len(seq):
                    assert seq[position + 1][3] >= ended, f"barrier after {call} {arg}"
            checked += 1
    assert checked == 3 * (2 + 2 + 2 + 2 * (2 + 1))
    slow_starts = [s for s in sequences[2] if s[1] == "on_start_source"]
    early = [e for e in sequences[0] if e[1] == "on_event"
             and any(s[3] <= e[3] < s[4] for s in slow_starts)]
    assert early, "member 0 waited for member 2's on_start_source: a barrier too many"


def test_an_error_on_the_third_event_rolls_back_and_replays(shared_broker: BrokerProcess) -> None:
    windows = [[(k, "A") for k in range(10 * w, 10 * w + 8)] for w in range(4)]

    async def go() -> tuple[Log, list[Recording], list[Recording]]:
        await make_topic(shared_broker, "rollback")
        await produce_windows(shared_broker, "rollback", windows)
        log: Log = []
        counted = {"events": 0, "failed": False}

        def third_event_of_window_2(call: str, arg: Any) -> Any:
            if call == "start_window":
                counted["events"] = 0
            if call == "event" and 20 <= arg[1] < 30 and not counted["failed"]:
                counted["events"] += 1
                if counted["events"] == 3:
                    counted["failed"] = True
                    return ERROR
            return SUCCESS

        failing = [Recording(f"f{i}", log, third_event_of_window_2) for i in range(2)]
        clean = [Recording(f"c{i}", log) for i in range(2)]
        client = DatabusClient(shared_broker.address,
                               config=DatabusConfig(retry_backoff_ms=10))
        client.register(failing, topic="rollback", name="failing")
        client.register(clean, topic="rollback", name="clean")
        async with client:
            await until(lambda: sum(c == "checkpoint" for _, c, _ in log) == 16)
        return log, failing, clean

    log, failing, clean = asyncio.run(go())

    def window_3(member_calls: list[tuple[str, Any]], begin: int) -> list[int]:
        start = member_calls.index(("start_window", 3), begin)
        end = member_calls.index(("end_window", 3), start)
        return [arg[1] for c, arg in member_calls[start:end] if c == "event"]

    for member in (0, 1):
        member_calls = calls(log, f"f{member}")
        rollback = member_calls.index(("rollback", 3))  # window 3 holds keys 20..27
        assert member_calls[rollback + 1] == ("start_window", 3)
        replayed = window_3(member_calls, rollback)
        assert replayed == window_3(calls(log, f"c{member}"), 0)  # its whole share, again
    assert sum(c == "rollback" for _, c, _ in log) == 2  # once per member of the group
    merged = {**failing[0].state, **failing[1].state}
    assert merged == {**clean[0].state, **clean[1].state}
    assert merged == {k: b"%d@%d" % (k, k // 10) for w in windows for k, _ in w}


def test_a_server_side_filter_at_registration(shared_broker: BrokerProcess) -> None:
    async def go() -> Log:
        await make_topic(shared_broker, "filtered")
        await produce_windows(shared_broker, "filtered", [[(k, "A") for k in range(20)]])
        log: Log = []
        client = DatabusClient(shared_broker.address)
        client.register(Recording("even", log), topic="filtered", filter="mod:2:[0]",
                        name="even")
        async with client:
            await until(lambda: any(c == "end_window" for _, c, _ in log))
        return log

    log = asyncio.run(go())
    assert [arg[1] for c, arg in calls(log, "even") if c == "event"] == list(range(0, 20, 2))


@pytest.mark.parametrize("case", ["retries", "fatal", "too_large", "budget"])
def test_consumption_stops_with_a_clear_error(shared_broker: BrokerProcess, case: str) -> None:
    topic = f"stops-{case.replace('_', '-')}"

    def fail(call: str, arg: Any) -> Any:
        if case == "retries" and call == "event" and arg[1] == 11:
            return ERROR
        if case == "fatal" and call == "event" and arg[1] == 11:
            return FATAL
        return SUCCESS

    class Slow(Recording):
        async def on_end_window(self, scn: Scn) -> Any:  # type: ignore[override]
            if int(scn) == 2:
                await asyncio.sleep(10)
            return super().on_end_window(scn)

    async def go() -> tuple[Log, BaseException | None]:
        await make_topic(shared_broker, topic)
        if case == "too_large":
            async with await Producer.create(shared_broker.address, topic) as producer:
                await producer.send_window([{"key": 1, "value": b"x" * 200}], partition=0)
        else:
            await produce_windows(shared_broker, topic, [[(1, "A"), (2, "A")], [(11, "A")],
                                                         [(21, "A")]])
        log: Log = []
        config = DatabusConfig(window_retries_max=2, retry_backoff_ms=10,
                               window_bytes_max=100 if case == "too_large" else 64 << 20,
                               call_budget_ms=200 if case == "budget" else 300_000)
        consumer = (Slow if case == "budget" else Recording)("c", log, fail)
        client = DatabusClient(shared_broker.address, config=config)
        client.register(consumer, topic=topic, name="c")
        await client.start()
        try:
            await asyncio.wait_for(client.wait(), 30)
        except Exception as e:
            return log, e
        finally:
            await client.stop()
        return log, None

    log, error = asyncio.run(go())
    names = [c for c, _ in calls(log, "c")]
    assert names[-1] == "stop_consumption"
    if case == "retries":
        assert isinstance(error, WindowRetriesExhausted) and "window_retries_max=2" in str(error)
        assert names.count("rollback") == 2 and 21 not in [a[1] for c, a in calls(log, "c")
                                                            if c == "event"]
        assert "error" in names
    elif case == "fatal":
        assert isinstance(error, ConsumerFatal)
        assert names[-2] == "event" and "rollback" not in names and "error" not in names
    elif case == "too_large":
        assert isinstance(error, WindowTooLarge) and "window_bytes_max=100" in str(error)
        assert "event" not in names
    else:
        assert isinstance(error, WindowRetriesExhausted)
        assert names.count("rollback") == 2  # each timed-out on_end_window counted as ERROR
