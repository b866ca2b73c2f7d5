"""Subscription restrictions on a real TLS + JWT broker: team B keeps off team A's names.

Goal: with `consume` and `admin` on a shared topic, team B may not use a
subscription name a superuser restricted to team A: Subscribe, Describe, Seek
and Delete of it, and the event processor stores for a consumer group of that
name, are refused with PERMISSION_DENIED saying what was refused and how to get
the right, and change nothing; ListSubscriptions leaves it out for B. Team A
still does all of it; an unrestricted name works for B as before. A restriction
made while B is attached ends B's stream at once (the recheck interval is set
far longer than the wait, so only the restriction's own sweep can end it). The
restriction survives a restart, and removing it opens the name again. The CLI
restricts, lists and unrestricts, with one-line errors and exit 2 on bad input.
Method: one real broker process (TLS, static tokens, HS256 JWTs); the teams
connect with JWTs, the superuser with a static token; sync gRPC stubs, SDK
Consumers and `python -m keybus` subprocesses. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from sdk import errors
from sdk.access_admin import AccessAdmin
from sdk.consumer import Consumer
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from tests.support.broker_process import BrokerProcess
from tests.support.security import SUPERUSER, TOKENS, SecureSetup
from tests.support.wire import int_batch

TOPIC = "shared.orders"
RECHECK_MS = 120_000  # far past WAIT_S: a stream ended in time was ended by the restriction
WAIT_S = 30.0
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    return SecureSetup.make(tmp_path_factory.mktemp("restrict-tls"))


@pytest.fixture(scope="module")
def broker(setup: SecureSetup, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("restrict") / "data", *setup.broker_args(),
                            "--auth-recheck-interval-ms", str(RECHECK_MS))
    process.start()
    root = setup.stub(process.address, SUPERUSER)
    root.CreateTopic(pb.CreateTopicRequest(topic=TOPIC), timeout=10)
    (answer,) = root.Produce(iter([pb.ProduceRequest(topic=TOPIC, batch=int_batch(
        list(range(20))))]), timeout=10)
    assert answer.error_code == 0
    root.GrantPermissions(pb.GrantPermissionsRequest(entries=[
        pb.AclEntry(principal=team, topic="shared.*", permission=permission)
        for team in ("team-a", "team-b")
        for permission in (pb.PERMISSION_CONSUME, pb.PERMISSION_ADMIN)]), timeout=10)
    yield process
    process.stop()


def team(setup: SecureSetup, broker: BrokerProcess, name: str) -> pb_grpc.KeybusStub:
    """A stub with a JWT of `name` (team-a, team-b) from the identity provider."""
    return setup.stub(broker.address, token=setup.hs256(name, expires_in_s=600))


def subscribe_once(stub: pb_grpc.KeybusStub, subscription: str) -> Any:
    """Open a Subscribe stream, return its first answer, and close it."""
    done = threading.Event()

    def requests() -> Iterator[pb.SubscribeRequest]:
        yield pb.SubscribeRequest(open=pb.SubscribeOpen(
            topic=TOPIC, subscription=subscription, consumer_name="c",
            initial_position=pb.StartPosition(earliest=True)))
        done.wait(10)

    call = stub.Subscribe(requests(), timeout=10)
    try:
        return next(call)
    finally:
        done.set()
        call.cancel()


def restrict(setup: SecureSetup, broker: BrokerProcess, subscription: str,
             *principals: str) -> int:
    async def go() -> int:
        async with AccessAdmin(broker.address, security=setup.security(SUPERUSER)) as admin:
            return await admin.restrict(TOPIC, subscription, principals)
    return asyncio.run(go())


def group(name: str, namespace: str = "ns") -> dict[str, str]:
    return {"namespace": namespace, "topic": TOPIC, "consumer_group": name}


def calls(name: str) -> dict[str, Callable[[pb_grpc.KeybusStub], Any]]:
    """Every RPC on subscription (or processor group) `name`, by RPC."""
    return {
        "Subscribe": lambda s: subscribe_once(s, name),
        "DescribeSubscription": lambda s: s.DescribeSubscription(
            pb.DescribeSubscriptionRequest(topic=TOPIC, subscription=name), timeout=10),
        "SeekSubscription": lambda s: s.SeekSubscription(pb.SeekSubscriptionRequest(
            topic=TOPIC, subscription=name, position=pb.StartPosition(latest=True)), timeout=10),
        "UpdateCheckpoint": lambda s: s.UpdateCheckpoint(pb.UpdateCheckpointRequest(
            checkpoint=pb.CheckpointRecord(**group(name), partition=0, offset=19)), timeout=10),
        "ClaimOwnership": lambda s: s.ClaimOwnership(pb.ClaimOwnershipRequest(
            **group(name, "elsewhere"), claims=[pb.OwnershipClaim(partition=0, owner_id="b")]),
            timeout=10),
        "FenceCheckpoints": lambda s: s.FenceCheckpoints(pb.FenceCheckpointsRequest(
            **group(name), partition=0, epoch=7, owner_id="b"), timeout=10),
        "ListCheckpoints": lambda s: s.ListCheckpoints(pb.ListCheckpointsRequest(**group(name)),
                                                       timeout=10),
        "DeleteSubscription": lambda s: s.DeleteSubscription(pb.DeleteSubscriptionRequest(
            topic=TOPIC, subscription=name), timeout=10),
    }


def state(root: pb_grpc.KeybusStub, name: str) -> tuple[Any, ...]:
    """What team B could have changed of `name`, as the superuser sees it."""
    described = root.DescribeSubscription(pb.DescribeSubscriptionRequest(
        topic=TOPIC, subscription=name), timeout=10)
    checkpoints = root.ListCheckpoints(pb.ListCheckpointsRequest(**group(name)), timeout=10)
    ownership = root.ListOwnership(pb.ListOwnershipRequest(**group(name, "elsewhere")),
                                   timeout=10)
    return (tuple(p.mark_delete for p in described.partitions),
            [c.SerializeToString() for c in checkpoints.checkpoints],
            [o.SerializeToString() for o in ownership.ownership])


def listed(stub: pb_grpc.KeybusStub) -> set[str]:
    response = stub.ListSubscriptions(pb.ListSubscriptionsRequest(topic=TOPIC), timeout=10)
    return {s.subscription for s in response.subscriptions}


def test_team_b_is_refused_team_a_restricted_subscription_and_team_a_is_not(
        broker: BrokerProcess, setup: SecureSetup) -> None:
    root = setup.stub(broker.address, SUPERUSER)
    a, b = team(setup, broker, "team-a"), team(setup, broker, "team-b")
    assert subscribe_once(a, "a-billing").WhichOneof("body") == "opened"
    a.UpdateCheckpoint(pb.UpdateCheckpointRequest(checkpoint=pb.CheckpointRecord(
        **group("a-billing"), partition=0, offset=3)), timeout=10)
    assert restrict(setup, broker, "a-billing", "team-a") == 1
    before = state(root, "a-billing")
    for rpc, call in calls("a-billing").items():
        with pytest.raises(grpc.RpcError) as refused:
            call(b)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, rpc
        noun = "subscription" if "Subscri" in rpc else "event processor group"
        assert refused.value.details() == (
            f"principal 'team-b' may not use {noun} 'a-billing' on topic '{TOPIC}', needed for "
            f"{rpc}: a superuser restricted it to other principals; use a "
            f"{'subscription' if noun == 'subscription' else 'group'} name of your own, or a "
            f"superuser adds you (keybus acl restrict {TOPIC} a-billing team-b)"), rpc
        assert state(root, "a-billing") == before, rpc  # refused: nothing changed
    assert "a-billing" not in listed(b) and "a-billing" in listed(a)
    # Team A does all of it (the delete last).
    for call in calls("a-billing").values():
        call(a)
    assert "a-billing" not in listed(root)
    # An unrestricted name works for team B as before.
    for call in calls("b-audit").values():
        call(b)


def test_a_restriction_made_while_team_b_is_attached_ends_its_stream(
        broker: BrokerProcess, setup: SecureSetup) -> None:
    b_security = setup.security(token=setup.hs256("team-b", expires_in_s=600))
    a_security = setup.security(token=setup.hs256("team-a", expires_in_s=600))

    async def go() -> None:
        consumer = await Consumer.subscribe(broker.address, TOPIC, "contested", start="earliest",
                                            security=b_security)
        try:
            consumer.ack(await consumer.receive(WAIT_S))  # attached and reading
            async with AccessAdmin(broker.address, security=setup.security(SUPERUSER)) as admin:
                assert await admin.restrict(TOPIC, "contested", ["team-a"]) == 1
            began = time.monotonic()
            with pytest.raises(errors.PermissionDenied) as ended:
                while time.monotonic() - began < WAIT_S:
                    consumer.ack(await consumer.receive(WAIT_S))
            assert time.monotonic() - began < WAIT_S < RECHECK_MS / 1000
        finally:
            await consumer.close()
        assert ("the right this stream was opened with was revoked: principal 'team-b' may "
                "not use subscription 'contested'") in str(ended.value)
        async with await Consumer.subscribe(broker.address, TOPIC, "contested",
                                            start="earliest", security=a_security) as taken:
            root = setup.stub(broker.address, SUPERUSER)
            (answer,) = root.Produce(iter([pb.ProduceRequest(topic=TOPIC, batch=int_batch(
                [99]))]), timeout=10)
            assert answer.error_code == 0
            assert (await taken.receive(WAIT_S)).offset >= 0  # team A reads on it
    asyncio.run(go())


def keybus(broker: BrokerProcess, setup: SecureSetup, principal: str, *args: str
           ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120", KEYBUS_BROKER=broker.address,
               KEYBUS_TLS_CA=setup.path("ca.pem"), KEYBUS_TOKEN=TOKENS[principal])
    return subprocess.run([sys.executable, "-m", "keybus", *args], capture_output=True,
                          text=True, timeout=60, env=env, cwd=REPO)


def one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_cli_restricts_lists_unrestricts_and_the_restriction_survives_a_restart(
        broker: BrokerProcess, setup: SecureSetup) -> None:
    b = team(setup, broker, "team-b")
    made = keybus(broker, setup, SUPERUSER, "acl", "restrict", TOPIC, "cli-*", "team-a", "carol")
    assert made.returncode == 0, made.stderr
    assert made.stdout == (f"subscription cli-* on {TOPIC} restricted to team-a, carol (2 new); "
                           "any other principal (but superusers) is refused it\n")
    with pytest.raises(grpc.RpcError) as refused:
        subscribe_once(b, "cli-x")
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    broker.restart()  # stored synced in the acls column family: still there
    b = team(setup, broker, "team-b")
    with pytest.raises(grpc.RpcError) as refused:
        subscribe_once(b, "cli-x")
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    listing = keybus(broker, setup, SUPERUSER, "acl", "restrictions", "--topic", TOPIC)
    assert listing.returncode == 0, listing.stderr
    assert "cli-*" in listing.stdout and "carol" in listing.stdout
    assert "subscription restriction(s): keybus acl restrictions" in keybus(
        broker, setup, SUPERUSER, "acl", "list").stdout
    # Bad input is usage (exit 2), in one line, before any call; a non-superuser: exit 1.
    assert "subscription pattern 'bad name' is invalid" in one_line(
        keybus(broker, setup, SUPERUSER, "acl", "restrict", TOPIC, "bad name", "x"), 2)
    assert "Missing argument 'PRINCIPALS...'" in one_line(
        keybus(broker, setup, SUPERUSER, "acl", "restrict", TOPIC, "s"), 2)
    assert "is not a superuser, and RestrictSubscription is for superusers only" in one_line(
        keybus(broker, setup, "alice", "acl", "restrict", TOPIC, "s", "alice"), 1)
    one = keybus(broker, setup, SUPERUSER, "acl", "unrestrict", TOPIC, "cli-*", "carol")
    assert one.stdout == f"removed 1 restriction(s) of subscription cli-* on {TOPIC}\n"
    rest = keybus(broker, setup, SUPERUSER, "acl", "unrestrict", TOPIC, "cli-*")
    assert rest.stdout == (f"removed 1 restriction(s) of subscription cli-* on {TOPIC}\n"
                           f"subscription cli-* on {TOPIC} is open again to every principal "
                           "with the topic's grant\n")
    assert subscribe_once(b, "cli-x").WhichOneof("body") == "opened"
