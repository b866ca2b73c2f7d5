"""A leader that loses ZooKeeper: it stops in bounded time and tells its producers why.

Goal: with ZooKeeper gone, a leader given SIGTERM exits within
`leader_handover_timeout_ms` plus a session timeout, giving up the
resignation it cannot record (the session's expiry frees its leader node);
the produces it holds are answered at once with UNAVAILABLE naming the lost
ZooKeeper (not after acks_timeout_ms), and an SDK producer's warning and
DeliveryTimeout carry the broker's message, as they do when too few
followers follow (refused at once, nothing stored). With ZooKeeper paused
(SIGSTOP: connections taken, nothing answered) the leader's stop is bounded
too, its log says it did not resign nor close its session, and a follower
leads and takes produce once ZooKeeper answers again (SIGCONT).
Method: Debian's ZooKeeper (installed when missing) on a free 127.0.0.1 port,
its own per test (it is stopped); `python -m broker` processes from
`keybus.dev_cluster`; the SDK in this process, its `keybus` log captured.
A killed follower keeps the leader from acknowledging: for the stop, no
follower holds its whole log, so the handover wait would run its full length
while ZooKeeper stops; for the producer a paused one (connected, so still
following), so its event is stored and waits for a copy when ZooKeeper
stops. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from keybus.dev_cluster import BrokerRunner, start_cluster
from sdk import Producer
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.errors import DeliveryTimeout
from tests.support.relay_cluster import cluster_story, role, wait_for, wait_settled, writable
from tests.support.wire import create_topic, int_batch, produce, stub
from tests.support.zookeeper import ZooKeeperServer, zookeeper_running

SESSION_MS = 2_000
HANDOVER_MS = 10_000  # longer than ZooKeeper takes to stop: the loss comes during the wait
PAUSED_HANDOVER_MS = 3_000  # the default


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    with zookeeper_running(tmp_path / "zk") as server:
        yield server


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path
            ) -> Iterator[Callable[..., list[BrokerRunner]]]:
    """Starts two brokers electing every topic with the given acks; kills them after."""
    started: list[BrokerRunner] = []

    def start(acks: int | str, **extra: object) -> list[BrokerRunner]:
        started.extend(start_cluster(tmp_path, 2, zookeeper.address, acks,
                                     session_timeout_ms=SESSION_MS,
                                     extra={"relay_retry_backoff_max_ms": 500, **extra}))
        return started
    try:
        yield start
    finally:
        for runner in started:
            runner.kill()


def said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and text in r.getMessage()]


async def until(condition: Callable[[], object], timeout_s: float, what: str) -> float:
    """Seconds until condition() holds (polled off the loop). Raises AssertionError."""
    began = time.monotonic()
    while not await asyncio.to_thread(condition):
        if time.monotonic() - began > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - began


def test_sigterm_without_zookeeper_stops_within_the_bound(
        zookeeper: ZooKeeperServer, cluster: Callable[..., list[BrokerRunner]]) -> None:
    brokers = cluster("leader", leader_handover_timeout_ms=HANDOVER_MS)
    create_topic(stub(brokers[0].address), "t")
    leader = brokers[wait_settled(brokers, "t", followers=1)]
    follower = next(b for b in brokers if b is not leader)
    follower.kill()
    batch = pb.EventBatch(count=1, key_ints=[7], slots=slots_of([7]), values=[b"last"])
    (answer,) = produce(stub(leader.address), [pb.ProduceRequest(topic="t", batch=batch,
                                                                 request_id=1)])
    assert not answer.error_code, answer.error_message  # acks=leader: on the leader alone
    assert leader.process is not None
    leader.process.send_signal(signal.SIGTERM)
    began = time.monotonic()
    zookeeper.stop()
    bound_s = (HANDOVER_MS + SESSION_MS) / 1000 + 5
    try:
        code = leader.process.wait(bound_s)
    except Exception:
        pytest.fail(f"the leader did not exit within {bound_s} s of SIGTERM:\n"
                    f"{cluster_story(brokers, 't')}")
    took = time.monotonic() - began
    print(f"leader exited {took:.2f} s after SIGTERM with ZooKeeper gone")
    assert code == 0
    text = leader.log_path.read_text()
    assert "not resigning: the ZooKeeper session is" in text or \
        "resignation not recorded" in text, text[-3000:]


UNCONFIRMED = "cannot confirm that it still leads topic 't'"


def test_a_leader_losing_zookeeper_answers_what_it_holds_and_the_producer_says_why(
        zookeeper: ZooKeeperServer, cluster: Callable[..., list[BrokerRunner]],
        caplog: pytest.LogCaptureFixture) -> None:
    brokers = cluster(1, acks_timeout_ms=60_000)
    create_topic(stub(brokers[0].address), "t")
    leader = brokers[wait_settled(brokers, "t", followers=1)]
    caplog.set_level(logging.INFO, logger="keybus")

    async def scenario() -> None:
        async with await Producer.create(",".join(b.address for b in brokers), "t",
                                         delivery_timeout_ms=8_000) as producer:
            await (await producer.send(1, b"copied"))
            follower = next(b for b in brokers if b is not leader)
            os.kill(follower.pid, signal.SIGSTOP)  # killed at the end, as it is
            held = await producer.send(2, b"held")  # stored; waits for a copy that never comes

            def stored() -> bool:
                info = role(leader.address, "t")
                return info is not None and info.partitions[0].log_end_offset == 2
            await until(stored, 10, "the leader stores the second event")
            began = time.monotonic()
            await asyncio.to_thread(zookeeper.stop)
            await until(lambda: said(caplog, UNCONFIRMED), 5,
                        "the producer warns with the broker's reason")
            took = time.monotonic() - began
            print(f"the producer said why {took:.2f} s after ZooKeeper stopped: "
                  f"{said(caplog, UNCONFIRMED)[0]}")
            with pytest.raises(DeliveryTimeout, match=r"last error: broker \S+ lost its "
                               r"ZooKeeper connection and cannot confirm"):
                await asyncio.wait_for(held, 30)

    asyncio.run(scenario())


def test_too_few_followers_reach_the_producer_with_the_brokers_words(
        cluster: Callable[..., list[BrokerRunner]], caplog: pytest.LogCaptureFixture) -> None:
    brokers = cluster(2, acks_timeout_ms=1_000)  # two copies wanted, one follower there
    create_topic(stub(brokers[0].address), "t")
    leader = brokers[wait_settled(brokers, "t", followers=1)]
    time.sleep(1.0)  # a leader gives its followers acks_timeout_ms to attach: past it
    caplog.set_level(logging.INFO, logger="keybus")
    missing = (f"topic 't' has acks=2, so 2 follower(s) must copy each event from its "
               f"leader {leader.address}, but 1 follow it now; nothing of this produce")

    async def scenario() -> None:
        async with await Producer.create(",".join(b.address for b in brokers), "t",
                                         delivery_timeout_ms=5_000) as producer:
            sent = await producer.send(1, b"x")
            with pytest.raises(DeliveryTimeout, match=re.escape(
                    f"no answer from the broker at {leader.address} within delivery_timeout_ms="
                    f"5000 (last error: {missing}")):
                await asyncio.wait_for(sent, 30)
        # the leader's address, the one the producer found among the three
        assert said(caplog, f"producer of topic 't': the broker at {leader.address} cannot "
                            f"take produce now ({missing}")
        info = role(leader.address, "t")
        assert info is not None and info.partitions[0].log_end_offset == 0  # nothing stored

    asyncio.run(scenario())



@pytest.mark.parametrize("when", ["at_once", "once_suspended"])
def test_sigterm_with_zookeeper_paused_stops_within_the_bound_and_a_follower_takes_over(
        zookeeper: ZooKeeperServer, tmp_path: Path, when: str) -> None:
    """ZooKeeper paused (SIGSTOP: its port takes connections, nothing answers) when the
    leader gets SIGTERM, at once (the session still CONNECTED: the resignation is tried)
    or once its session is SUSPENDED: the leader exits within its documented bound and
    says on its log what it could not do (resign, close its session); once ZooKeeper
    answers again (SIGCONT) its session expires and a follower leads and takes produce.
    Three brokers with acks = 1: the new leader still has a follower to copy its produce."""
    brokers = start_cluster(tmp_path, 3, zookeeper.address, 1, session_timeout_ms=SESSION_MS,
                            extra={"relay_retry_backoff_max_ms": 500,
                                   "leader_handover_timeout_ms": PAUSED_HANDOVER_MS})
    assert zookeeper.process is not None
    zk_pid = zookeeper.process.pid
    try:
        create_topic(stub(brokers[0].address), "t")
        leader = brokers[wait_settled(brokers, "t", followers=2)]
        others = [b for b in brokers if b is not leader]
        (answer,) = produce(stub(leader.address), [pb.ProduceRequest(
            topic="t", batch=int_batch([1]), request_id=1)])
        assert not answer.error_code, answer.error_message
        wait_settled(brokers, "t", followers=2)  # both followers hold it
        assert leader.process is not None
        os.kill(zk_pid, signal.SIGSTOP)
        try:
            if when == "once_suspended":
                wait_for(lambda: "session SUSPENDED" in leader.log_path.read_text(),
                         SESSION_MS / 1000 + 5, "the leader notices ZooKeeper does not answer")
            began = time.monotonic()
            leader.process.send_signal(signal.SIGTERM)
            # Documented: the handover wait, the resignation and the session's close are
            # bounded, then the server's 2 s grace for open streams; 5 s of margin.
            bound_s = (PAUSED_HANDOVER_MS + 2 * SESSION_MS) / 1000 + 2 + 5
            try:
                code = leader.process.wait(bound_s)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the leader did not exit within {bound_s} s of SIGTERM with "
                            f"ZooKeeper paused:\n{leader.log_path.read_text()[-4000:]}")
            print(f"leader exited {time.monotonic() - began:.2f} s after SIGTERM with "
                  f"ZooKeeper paused ({when})")
        finally:
            os.kill(zk_pid, signal.SIGCONT)
        assert code == 0
        text = leader.log_path.read_text()
        if when == "once_suspended":
            assert "topic t: not resigning: the ZooKeeper session is SUSPENDED" in text, \
                text[-4000:]
        else:  # the session dropped during the resignation, or just before it
            assert "topic t: resignation not recorded" in text or \
                "topic t: not resigning" in text, text[-4000:]
        # ZooKeeper never answered the close: its leader node waits for the session's expiry
        assert re.search(r"session 0x[0-9a-f]+ not closed: .*\(its live nodes and any leader "
                         r"node\) until it expires the session", text), text[-4000:]
        resumed = time.monotonic()
        wait_for(lambda: len(writable(others, "t")) == 1, SESSION_MS / 1000 + 20,
                 "a follower leads once ZooKeeper answers again")
        (successor,) = (others[i] for i in writable(others, "t"))
        (answer,) = produce(stub(successor.address), [pb.ProduceRequest(
            topic="t", batch=int_batch([2]), request_id=1)])
        assert not answer.error_code, answer.error_message
        print(f"{successor.address} took produce {time.monotonic() - resumed:.2f} s after "
              "ZooKeeper resumed")
    except BaseException:
        print(cluster_story(brokers, "t"))
        raise
    finally:
        os.kill(zk_pid, signal.SIGCONT)
        for runner in brokers:
            runner.kill()


KAZOO_ATTEMPT_LINES = ("kazoo.client Connecting to", "kazoo.client Connection dropped",
                       "kazoo.client Connection time-out")


def test_zookeeper_killed_and_restarted_is_said_once_not_per_reconnect_attempt(
        zookeeper: ZooKeeperServer, cluster: Callable[..., list[BrokerRunner]]) -> None:
    """ZooKeeper SIGKILLed, then started again on its port and data: kazoo retries about
    once a second meanwhile (zk.py), and used to log two lines per attempt on every
    broker (a ten-minute outage: ~1,200). Each broker now says each kind once, and its
    CONNECTED line counts the failed attempts; the leader takes produce again."""
    brokers = cluster(1)
    create_topic(stub(brokers[0].address), "t")
    wait_settled(brokers, "t", followers=1)
    offsets = [len(b.log_path.read_bytes()) for b in brokers]
    assert zookeeper.process is not None
    zookeeper.process.kill()
    zookeeper.process.wait(10)
    wait_for(lambda: not writable(brokers, "t"), SESSION_MS / 1000 + 5,
             "the leader stops acknowledging")
    time.sleep(4)  # the outage: kazoo attempts to connect about once a second
    zookeeper.start()  # the same port and data dir: the sessions are still there
    wait_for(lambda: len(writable(brokers, "t")) == 1, 30, "the leader takes produce again")

    def since_kill(i: int) -> str:
        return brokers[i].log_path.read_bytes()[offsets[i]:].decode(errors="replace")

    wait_for(lambda: all("session CONNECTED" in since_kill(i) for i in range(len(brokers))),
             30, "every broker is connected again")
    for i in range(len(brokers)):
        text = since_kill(i)
        attempts = [line for line in text.splitlines()
                    if any(kind in line for kind in KAZOO_ATTEMPT_LINES)]
        assert len(attempts) <= len(KAZOO_ATTEMPT_LINES), "\n".join(attempts)
        found = re.search(r"session CONNECTED after [0-9.]+ s of failed connection attempts "
                          r"\((\d+) failed", text)
        assert found is not None, text[-3000:]
        assert int(found.group(1)) >= 3, found.group(0)  # the outage did repeat attempts
