"""Every RPC of the contract behind TLS and tokens: refused, denied, allowed.

Goal: with TLS and authentication on, each RPC of `service Keybus` answers
UNAUTHENTICATED without credentials (or with a token the broker does not
know), PERMISSION_DENIED for a principal lacking the permission -- naming
the principal, the topic and the permission, and changing nothing -- and
works for a principal holding the right. JWTs: HS256 and RS256 accepted;
expired, badly signed and wrongly keyed ones refused.
Method: one real broker process (TLS, static tokens, JWT keys); sync gRPC
stubs over TLS as different principals. "Nothing changed" is checked by
reading the broker's whole visible state (topics with their end offsets,
subscriptions with their cursors, grants) as the superuser before and after
each denied call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from tests.support.broker_process import BrokerProcess
from tests.support.security import SUPERUSER, SecureSetup
from tests.support.wire import int_batch

TOPIC = "sec.data"
SUBSCRIPTION = "sub1"
GROUP = {"namespace": "ns", "topic": TOPIC, "consumer_group": "g"}  # event processor stores


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    return SecureSetup.make(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def secure_broker(setup: SecureSetup, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("secure") / "data", *setup.broker_args())
    process.start()
    root = setup.stub(process.address, SUPERUSER)
    root.CreateTopic(pb.CreateTopicRequest(topic=TOPIC), timeout=10)
    responses = list(root.Produce(iter([pb.ProduceRequest(topic=TOPIC, batch=int_batch([1, 2, 3]))]),
                                  timeout=10))
    assert responses[0].error_code == 0
    subscribe_once(root, SUBSCRIPTION)
    root.GrantPermissions(pb.GrantPermissionsRequest(entries=[
        pb.AclEntry(principal="alice", topic="sec.*", permission=pb.PERMISSION_PRODUCE),
        pb.AclEntry(principal="alice", topic="sec.*", permission=pb.PERMISSION_CONSUME),
        pb.AclEntry(principal="carol", topic="sec.*", permission=pb.PERMISSION_ADMIN)]), timeout=10)
    yield process
    process.stop()


def subscribe_once(stub: pb_grpc.KeybusStub, subscription: str, topic: str = TOPIC) -> Any:
    """Open a Subscribe stream, return its first answer, and close it."""
    done = threading.Event()

    def requests() -> Iterator[pb.SubscribeRequest]:
        yield pb.SubscribeRequest(open=pb.SubscribeOpen(
            topic=topic, subscription=subscription, consumer_name="c",
            initial_position=pb.StartPosition(earliest=True)))
        done.wait(10)

    call = stub.Subscribe(requests(), timeout=10)
    try:
        return next(call)
    finally:
        done.set()
        call.cancel()


def produce(stub: pb_grpc.KeybusStub, topic: str = TOPIC) -> pb.ProduceResponse:
    (answer,) = stub.Produce(iter([pb.ProduceRequest(topic=topic, batch=int_batch([9]))]),
                             timeout=10)
    return answer  # type: ignore[no-any-return]


def state(root: pb_grpc.KeybusStub) -> tuple[Any, ...]:
    """Everything a call could change, as the superuser sees it."""
    topics = root.ListTopics(pb.ListTopicsRequest(), timeout=10).topics
    subscriptions = root.ListSubscriptions(pb.ListSubscriptionsRequest(topic=TOPIC), timeout=10)
    permissions = root.ListPermissions(pb.ListPermissionsRequest(), timeout=10)
    grants, restrictions = permissions.entries, permissions.restrictions
    ownership = root.ListOwnership(pb.ListOwnershipRequest(**GROUP), timeout=10).ownership
    checkpoints = root.ListCheckpoints(pb.ListCheckpointsRequest(**GROUP), timeout=10).checkpoints
    return (sorted((t.topic, tuple(p.end_offset for p in t.partitions)) for t in topics),
            sorted((s.subscription, tuple(p.mark_delete for p in s.partitions))
                   for s in subscriptions.subscriptions),
            sorted((g.principal, g.topic, g.permission) for g in grants),
            sorted((r.topic, r.subscription, r.principal) for r in restrictions),
            [o.SerializeToString() for o in ownership],
            [c.SerializeToString() for c in checkpoints])


def grant_entry(principal: str = "dave") -> list[pb.AclEntry]:
    return [pb.AclEntry(principal=principal, topic="sec.x", permission=pb.PERMISSION_CONSUME)]


def restriction(principal: str = "dave") -> list[pb.SubscriptionRestriction]:
    return [pb.SubscriptionRestriction(topic="sec.x", subscription="s", principal=principal)]


# Each RPC: the call, and who holds the right to make it. Calls that change
# something act on names of their own, which `prepare` makes as the superuser
# before the state is read.
def _prepare_victims(root: pb_grpc.KeybusStub) -> None:
    if "sec.victim" not in [t.topic for t in root.ListTopics(pb.ListTopicsRequest()).topics]:
        root.CreateTopic(pb.CreateTopicRequest(topic="sec.victim"), timeout=10)
    subscribe_once(root, "sub-del")
    root.GrantPermissions(pb.GrantPermissionsRequest(entries=grant_entry("erin")), timeout=10)
    root.RestrictSubscription(pb.RestrictSubscriptionRequest(entries=restriction("erin")),
                              timeout=10)


Call = Callable[[pb_grpc.KeybusStub, pb_grpc.KeybusStub], Any]
RPCS: dict[str, tuple[Call, str]] = {
    "Produce": (lambda s, r: produce(s), "alice"),
    "InitProducer": (lambda s, r: s.InitProducer(pb.InitProducerRequest(topic=TOPIC), timeout=10),
                     "alice"),
    "Read": (lambda s, r: list(s.Read(pb.ReadRequest(
        topic=TOPIC, start=pb.StartPosition(earliest=True)), timeout=10)), "alice"),
    "Subscribe": (lambda s, r: subscribe_once(s, "sub-new"), "alice"),
    "CreateTopic": (lambda s, r: s.CreateTopic(pb.CreateTopicRequest(topic="sec.created"),
                                               timeout=10), "carol"),
    "ListTopics": (lambda s, r: s.ListTopics(pb.ListTopicsRequest(), timeout=10), "bob"),
    "DescribeTopic": (lambda s, r: s.DescribeTopic(pb.DescribeTopicRequest(topic=TOPIC),
                                                   timeout=10), "alice"),
    "DeleteTopic": (lambda s, r: s.DeleteTopic(pb.DeleteTopicRequest(topic="sec.victim"),
                                               timeout=10), "carol"),
    "ListSubscriptions": (lambda s, r: s.ListSubscriptions(
        pb.ListSubscriptionsRequest(topic=TOPIC), timeout=10), "alice"),
    "DescribeSubscription": (lambda s, r: s.DescribeSubscription(
        pb.DescribeSubscriptionRequest(topic=TOPIC, subscription=SUBSCRIPTION), timeout=10),
        "alice"),
    "SeekSubscription": (lambda s, r: s.SeekSubscription(pb.SeekSubscriptionRequest(
        topic=TOPIC, subscription=SUBSCRIPTION, position=pb.StartPosition(latest=True)),
        timeout=10), "carol"),
    "DeleteSubscription": (lambda s, r: s.DeleteSubscription(pb.DeleteSubscriptionRequest(
        topic=TOPIC, subscription="sub-del"), timeout=10), "carol"),
    "GrantPermissions": (lambda s, r: s.GrantPermissions(pb.GrantPermissionsRequest(
        entries=grant_entry()), timeout=10), SUPERUSER),
    "RevokePermissions": (lambda s, r: s.RevokePermissions(pb.RevokePermissionsRequest(
        entries=grant_entry("erin")), timeout=10), SUPERUSER),
    "ListPermissions": (lambda s, r: s.ListPermissions(pb.ListPermissionsRequest(), timeout=10),
                        SUPERUSER),
    "WhoAmI": (lambda s, r: s.WhoAmI(pb.WhoAmIRequest(), timeout=10), "bob"),
    "RestrictSubscription": (lambda s, r: s.RestrictSubscription(pb.RestrictSubscriptionRequest(
        entries=restriction()), timeout=10), SUPERUSER),
    "UnrestrictSubscription": (lambda s, r: s.UnrestrictSubscription(
        pb.UnrestrictSubscriptionRequest(entries=restriction("erin")), timeout=10), SUPERUSER),
    "ListOwnership": (lambda s, r: s.ListOwnership(pb.ListOwnershipRequest(**GROUP), timeout=10),
                      "alice"),
    "ClaimOwnership": (lambda s, r: s.ClaimOwnership(pb.ClaimOwnershipRequest(
        **GROUP, claims=[pb.OwnershipClaim(partition=0, owner_id="p1")]), timeout=10), "alice"),
    "ListCheckpoints": (lambda s, r: s.ListCheckpoints(pb.ListCheckpointsRequest(**GROUP),
                                                       timeout=10), "alice"),
    "UpdateCheckpoint": (lambda s, r: s.UpdateCheckpoint(pb.UpdateCheckpointRequest(
        checkpoint=pb.CheckpointRecord(**GROUP, partition=0, offset=1)), timeout=10), "alice"),
    "FenceCheckpoints": (lambda s, r: s.FenceCheckpoints(pb.FenceCheckpointsRequest(
        **GROUP, partition=0, epoch=5, owner_id="p1"), timeout=10), "alice"),
    "DescribeCluster": (lambda s, r: s.DescribeCluster(pb.DescribeClusterRequest(topic=TOPIC),
                                                       timeout=10), "alice"),
    "EpochEnd": (lambda s, r: s.EpochEnd(pb.EpochEndRequest(topic=TOPIC), timeout=10), "alice"),
    "ReportReplicaPositions": (lambda s, r: list(s.ReportReplicaPositions(iter([pb.ReplicaPosition(
        topic=TOPIC, broker_id="follower")]), timeout=10)), "carol"),
    "Bootstrap": (lambda s, r: list(s.Bootstrap(pb.BootstrapRequest(topic=TOPIC), timeout=10)),
                  "alice"),
}
# Open to any authenticated principal: nothing to deny.
OPEN_TO_ANYONE = {"ListTopics", "WhoAmI"}


def test_every_rpc_of_the_contract_is_covered() -> None:
    assert set(RPCS) == set(pb.DESCRIPTOR.services_by_name["Keybus"].methods_by_name)


@pytest.mark.parametrize("rpc", sorted(RPCS))
@pytest.mark.parametrize("token", ["", "a-token-the-broker-never-issued-0123"])
def test_without_credentials_unauthenticated(secure_broker: BrokerProcess, setup: SecureSetup,
                                             rpc: str, token: str) -> None:
    root = setup.stub(secure_broker.address, SUPERUSER)
    _prepare_victims(root)
    before = state(root)
    with pytest.raises(grpc.RpcError) as refused:
        RPCS[rpc][0](setup.stub(secure_broker.address, token=token), root)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert rpc in refused.value.details()
    assert state(root) == before


@pytest.mark.parametrize("rpc", sorted(set(RPCS) - OPEN_TO_ANYONE))
def test_lacking_the_permission_denied_and_nothing_changes(
        secure_broker: BrokerProcess, setup: SecureSetup, rpc: str) -> None:
    root = setup.stub(secure_broker.address, SUPERUSER)
    _prepare_victims(root)
    before = state(root)
    # carol administers sec.* but is no superuser; bob holds nothing; alice
    # produces and consumes but may not administer.
    who = {"GrantPermissions": "carol", "RevokePermissions": "carol", "ListPermissions": "alice",
           "RestrictSubscription": "carol", "UnrestrictSubscription": "carol",
           "CreateTopic": "alice", "DeleteTopic": "alice", "SeekSubscription": "alice",
           "DeleteSubscription": "alice"}.get(rpc, "bob")
    stub = setup.stub(secure_broker.address, who)
    if rpc == "Produce":  # refused in the stream, which stays open
        answer = produce(stub)
        code, details = answer.error_code, answer.error_message
        assert code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    else:
        with pytest.raises(grpc.RpcError) as refused:
            RPCS[rpc][0](stub, root)
        code, details = refused.value.code(), refused.value.details()
        assert code == grpc.StatusCode.PERMISSION_DENIED
    assert f"principal {who!r}" in details and rpc in details
    superuser_only = rpc.endswith("Permissions") or rpc in ("RestrictSubscription",
                                                            "UnrestrictSubscription")
    needed = "superuser" if superuser_only else "permission on topic 'sec."
    assert needed in details
    assert state(root) == before


@pytest.mark.parametrize("rpc", sorted(RPCS))
def test_with_the_right_works(secure_broker: BrokerProcess, setup: SecureSetup, rpc: str) -> None:
    call, principal = RPCS[rpc]
    root = setup.stub(secure_broker.address, SUPERUSER)
    _prepare_victims(root)
    answer = call(setup.stub(secure_broker.address, principal), root)
    if rpc == "Produce":
        assert answer.error_code == 0 and answer.count == 1
    if rpc == "Subscribe":
        assert answer.WhichOneof("body") == "opened"
    if rpc == "WhoAmI":
        assert answer.principal == "bob" and answer.tls and not answer.superuser


def test_list_topics_shows_only_what_the_principal_may_use(
        secure_broker: BrokerProcess, setup: SecureSetup) -> None:
    def names(principal: str) -> set[str]:
        stub = setup.stub(secure_broker.address, principal)
        return {t.topic for t in stub.ListTopics(pb.ListTopicsRequest(), timeout=10).topics}
    assert TOPIC in names("alice") and TOPIC in names(SUPERUSER)
    assert names("bob") == set()


def test_jwts_hs256_and_rs256_accepted(secure_broker: BrokerProcess, setup: SecureSetup) -> None:
    for token in (setup.hs256("alice"), setup.rs256("alice")):
        stub = setup.stub(secure_broker.address, token=token)
        assert stub.WhoAmI(pb.WhoAmIRequest(), timeout=10).principal == "alice"
        assert stub.DescribeTopic(pb.DescribeTopicRequest(topic=TOPIC), timeout=10).topic == TOPIC


@pytest.mark.parametrize("kind, expected", [
    ("expired", "expired"),
    ("wrong HS256 key", "signature does not verify"),
    ("RS256 token signed by another key", "signature does not verify"),
    ("unsigned (alg none)", "accepts HS256, RS256"),
])
def test_bad_jwts_refused(secure_broker: BrokerProcess, setup: SecureSetup, kind: str,
                          expected: str) -> None:
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    tokens = {
        "expired": lambda: setup.hs256("alice", expires_in_s=-60),
        "wrong HS256 key": lambda: setup.hs256("alice", key=b"not-the-secret-0123456789abcdef-xyz"),
        "RS256 token signed by another key": lambda: jwt.encode(
            {"sub": "alice", "exp": 2**40}, rsa.generate_private_key(65537, 2048), algorithm="RS256"),
        "unsigned (alg none)": lambda: jwt.encode({"sub": "root", "exp": 2**40}, None,
                                                  algorithm="none"),
    }
    stub = setup.stub(secure_broker.address, token=tokens[kind]())
    with pytest.raises(grpc.RpcError) as refused:
        stub.DescribeTopic(pb.DescribeTopicRequest(topic=TOPIC), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert expected in refused.value.details()


def test_health_check_stays_open(secure_broker: BrokerProcess, setup: SecureSetup) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    stub = health_pb2_grpc.HealthStub(setup.channel(secure_broker.address))
    answer = stub.Check(health_pb2.HealthCheckRequest(service="keybus.v1.Keybus"), timeout=10)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_plain_text_client_cannot_talk_to_a_tls_broker(secure_broker: BrokerProcess) -> None:
    stub = pb_grpc.KeybusStub(grpc.insecure_channel(secure_broker.address))
    with pytest.raises(grpc.RpcError) as refused:
        stub.ListTopics(pb.ListTopicsRequest(), timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mtls_wrong_client_certificate_refused_at_handshake(
        setup: SecureSetup, tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", *setup.broker_args(mtls=True))
    broker.start()
    try:
        # alice's certificate (our CA) is her principal: no token needed.
        alice = setup.stub(broker.address, client_cert="alice")
        assert alice.WhoAmI(pb.WhoAmIRequest(), timeout=10).principal == "alice"
        for stub in (setup.stub(broker.address, SUPERUSER, client_cert="mallory"),
                     setup.stub(broker.address, SUPERUSER)):  # another CA's certificate; none
            with pytest.raises(grpc.RpcError) as refused:
                stub.WhoAmI(pb.WhoAmIRequest(), timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # no connection at all
        log = broker.log_path.read_text()
        assert "Handshake failed" in log
    finally:
        broker.stop()
